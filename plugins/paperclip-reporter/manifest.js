// The plugin's manifest (Paperclip plugin API v1). Capabilities are the least it needs: hear run
// events, read the finished run's agent (its reporting metadata), and post to the service.
export default {
  id: "svc.paperclip-reporter",
  apiVersion: 1,
  version: "1.0.0",
  displayName: "Agent-team service run reporter",
  description:
    "Posts every finished or failed run of an agent deployed by the agent-team service to that service's run ingest endpoint, with the install's token.",
  author: "agent-team service",
  categories: ["connector"],
  capabilities: ["events.subscribe", "agents.read", "http.outbound"],
  entrypoints: { worker: "./worker.js" },
};
