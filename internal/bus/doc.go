// Package bus carries agentq's CloudEvents over NATS JetStream.
//
// It holds the shared mechanisms every consumer stands on:
//
//   - the codec between a CloudEvent (github.com/cloudevents/sdk-go/v2
//     event model) and a NATS message, following the CloudEvents NATS
//     protocol binding: agentq publishes in binary content mode (attributes
//     as "ce-" headers, data as the payload) and accepts both binary and
//     structured (application/cloudevents+json) messages; decoding never
//     panics and refuses what it cannot carry safely (see Decode);
//   - subject derivation: agentq.<domain>.<event>.v<N> published for tenant
//     t goes to <domain>.<event>.<t>;
//   - the streams AGENTQ and AGENTQ_DLQ and the delivery ledger bucket,
//     created or updated idempotently;
//   - tenant-scoped identity: Nats-Msg-Id is "<tenant>:<event id>"
//     (MsgID), and result ids derive from consumer, tenant, type and what
//     the result is about, never from batching (DeriveID, NewResult,
//     NewStateResult);
//   - the Publisher, which validates data against its schema, sets
//     Nats-Msg-Id and waits for the JetStream ack (or uses a bounded async
//     window for bulk paths);
//   - the Runner, one durable pull consumer per binary: it holds at most two
//     batches and keeps them alive with InProgress, decodes and validates
//     every message, hands batches to a handler, splits failed batches to
//     isolate the culprit, counts failures (not deliveries) in the delivery
//     ledger, and maps each outcome to Ack, NakWithDelay or Term plus a dead
//     letter in one place (settle);
//   - ForEach and Concurrent for slow per-event work, and Read and Handle
//     for tools that drive a handler without a runner (a rebuild).
package bus
