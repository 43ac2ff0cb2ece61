// Package bench is the benchmark harness behind `agentq bench`. Each
// benchmark starts an embedded NATS server, runs agentq's consumers in
// process on the configured database (the PGlite dev database where it
// allows it, whose figures mean nothing for production) and measures them
// in the same run as an anchor: the same work done with nothing of agentq
// around it, so a figure reads as a share of what the machine can do.
//
//   - Scorer: the scorer draining a backlog of tool.executed, against a
//     plain JetStream pull consumer acking the same messages (raw) and
//     against the Postgres ceiling of its database work (per batch, the
//     inbox insert and the metric upserts in one pipelined transaction,
//     no NATS); then publishing and consuming at once against raw, and
//     publish → quality.changed latency under light traffic.
//   - Indexer: prompts and tools indexed per second, against the embedder
//     alone and a bare INSERT of the same rows with and without vectors;
//     then search.prompts, search.tools and prompts.get latency through
//     NATS, closed loop at each concurrency and open loop at a share of
//     capacity, against the embedder alone on one query, the bare kNN
//     statement, the bare full-text arm, both arms at once, the bare
//     prompts.get statement and a bare NATS request/reply of the same
//     size; and the kNN arm's recall@K against an exact scan.
//   - Degrader: tool.executed → tool.quarantined on the stream and → the
//     webhook POST received, against one event published to a plain
//     JetStream pull consumer.
//
// Each returns its figures as a result whose Print writes the table the
// command shows; rates are medians over rounds where there are rounds.
package bench
