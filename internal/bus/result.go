package bus

import (
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

// resultNamespace seeds derived result ids.
var resultNamespace = uuid.MustParse("6f1d6c1e-8a53-4d0a-9a57-7a1e0b7c2f31")

// DeriveID returns the deterministic id of the result of type resultType that
// consumer publishes because of the event causeID: a retry after a crash
// republishes the same id, which JetStream's duplicate window drops.
func DeriveID(consumer, resultType, causeID string) string {
	return uuid.NewSHA1(resultNamespace, []byte(consumer+"\x00"+resultType+"\x00"+causeID)).String()
}

// NewResult builds a result event caused by cause, with a deterministic id
// derived from consumer, its type and the causing event's id.
func NewResult(consumer, eventType string, cause event.Event, data any) (event.Event, error) {
	ev, err := buildEvent(DeriveID(consumer, eventType, cause.ID()), eventType, Tenant(cause), "agentq/"+consumer, data)
	if err != nil {
		return ev, err
	}
	ev.SetExtension(ExtCausation, cause.ID())
	return ev, nil
}
