// Package bus carries agentq's CloudEvents over NATS JetStream.
//
// It holds the shared mechanisms every consumer stands on:
//
//   - the codec between a CloudEvent (github.com/cloudevents/sdk-go/v2
//     event model) and a NATS message, following the CloudEvents NATS
//     protocol binding: agentq publishes in binary content mode (attributes
//     as "ce-" headers, data as the payload) and accepts both binary and
//     structured (application/cloudevents+json) messages;
//   - subject derivation: agentq.<domain>.<event>.v<N> published for tenant
//     t goes to <domain>.<event>.<t>;
//   - the streams AGENTQ and AGENTQ_DLQ, created or updated idempotently;
//   - the Publisher, which validates data against its schema, sets
//     Nats-Msg-Id to the event id and waits for the JetStream ack (or uses a
//     bounded async window for bulk paths);
//   - the Runner, one durable pull consumer per binary, which decodes and
//     validates every message, hands batches to a handler, and maps each
//     outcome to Ack, NakWithDelay or Term plus a dead letter in one place.
package bus
