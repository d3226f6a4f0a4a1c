// The worker: on every finished or failed heartbeat run, post the run to the service that
// deployed its agent. The ingest endpoint deduplicates by runId, so a retry never counts twice.
import { definePlugin, runWorker } from "@paperclipai/plugin-sdk";
import { reportFor } from "./report.js";

const ATTEMPTS = 4;

async function post(report, logger, runId) {
  for (let attempt = 0; attempt < ATTEMPTS; attempt += 1) {
    try {
      const response = await fetch(report.url, {
        method: "POST",
        headers: { authorization: `Bearer ${report.token}`, "content-type": "application/json" },
        body: JSON.stringify(report.body),
      });
      if (response.ok) return;
      if (response.status < 500 && response.status !== 429) {
        logger.warn("run report refused", { runId, status: response.status });
        return;
      }
    } catch (err) {
      logger.warn("run report not delivered", { runId, error: String(err?.message ?? err) });
    }
    await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** attempt));
  }
  logger.error("run report dropped after retries", { runId });
}

const plugin = definePlugin({
  async setup(ctx) {
    const onRun = async (event) => {
      const run = event.payload ?? {};
      if (!run.agentId) return;
      const agent = await ctx.agents.get(run.agentId, event.companyId);
      const report = reportFor(agent, run);
      if (report) await post(report, ctx.logger, run.runId);
    };
    ctx.events.on("agent.run.finished", onRun);
    ctx.events.on("agent.run.failed", onRun);
  },
  async onHealth() {
    return { status: "ok" };
  },
});

export default plugin;
runWorker(plugin, import.meta.url);
