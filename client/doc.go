// Package client is agentq's Go client for agents: publish what the agent
// does, find prompts and tools, get prompts through a cache that is never
// stale for long, and follow tool alerts.
//
//	c, err := client.Connect(ctx, client.Config{URL: "nats://127.0.0.1:4222", Tenant: "acme"})
//	...
//	defer c.Close()
//	got, err := c.GetPrompt(ctx, "sql-repair", client.WithParams(map[string]any{"Query": q, "Error": msg}))
//	...
//	c.Publish(ctx, client.ToolExecuted{ToolName: "web_search", Success: true, LatencyMS: 120})
//
// Publishing: each input event type has its struct (ToolExecuted,
// PromptCreated, FeedbackSubmitted, ...). Publish checks the data against
// the type's JSON schema before anything leaves (a *ValidationError names
// the field), sends it as a CloudEvent with the tenant-scoped Nats-Msg-Id
// agentq's own publishers use, and awaits JetStream's ack in the
// background within a bounded window; Flush waits for the acks and
// returns the failures (*RefusedError, *TimeoutError, *UnavailableError).
//
// Prompts: GetPrompt answers from a local cache. The indexer publishes
// prompt.indexed for every new version and every moved label; the client
// hears it over core NATS and fetches the prompt again at once, so every
// connected client serves the change milliseconds after the indexer made
// it. A reconnect revalidates everything cached (changes may have been
// missed meanwhile). While agentq cannot be asked, GetPrompt serves the
// last version it knew, and returns an *UnavailableError for a prompt it
// never fetched.
//
// Agents in other languages publish the same CloudEvents on NATS with the
// same headers, or use the MCP server or CloudEvents over HTTP:
// docs/agents.md in the agentq repository.
package client
