// What to post for one finished run: pure, so it reads the same in the worker and in a test.
//
// The service deploys each local-adapter agent with `metadata.svcReporting = {ingestUrl,
// installToken, installId, agentKey}`. Agents without it (anything the service did not deploy, and
// its `http` agents, whose runs the service records itself) are not reported, so no run is counted
// twice. Paperclip 2026.916.1 gives plugins no per-run token counts: they are sent as null.

/** @typedef {{runId: string, agentId: string, status: string, error?: string | null}} RunPayload */

const STATUSES = { succeeded: "completed", failed: "failed", timed_out: "failed" };

/**
 * @param {{id: string, metadata?: Record<string, unknown> | null} | null} agent
 * @param {RunPayload} run
 * @returns {{url: string, token: string, body: Record<string, unknown>} | null}
 */
export function reportFor(agent, run) {
  const reporting = agent?.metadata?.svcReporting;
  if (!reporting || typeof reporting !== "object") return null;
  const { ingestUrl, installToken } = /** @type {Record<string, unknown>} */ (reporting);
  if (typeof ingestUrl !== "string" || typeof installToken !== "string") return null;
  const status = STATUSES[run.status];
  if (!status || !run.runId) return null;
  return {
    url: ingestUrl,
    token: installToken,
    body: {
      platform: "orchA",
      platformAgentId: agent.id,
      runId: run.runId,
      status,
      inputTokens: null,
      outputTokens: null,
      errorMessage: status === "failed" ? String(run.error ?? "The run failed").slice(0, 2000) : null,
    },
  };
}
