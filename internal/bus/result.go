package bus

import (
	"strconv"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

// resultNamespace seeds derived result ids.
var resultNamespace = uuid.MustParse("6f1d6c1e-8a53-4d0a-9a57-7a1e0b7c2f31")

// DeriveID returns the deterministic id of a result: what consumer
// publishes of type resultType for tenant about one thing (a causing event,
// or a target's state version). It never depends on batching, so a retry
// after a crash, another copy, or a rebuild derive the same id, and the
// tenant is part of it, so two tenants' results never collide even when
// their agents reuse event ids.
func DeriveID(consumer, tenant, resultType, about string) string {
	return uuid.NewSHA1(resultNamespace, []byte(consumer+"\x00"+tenant+"\x00"+resultType+"\x00"+about)).String()
}

// NewResult builds the result of type eventType that consumer publishes
// because of cause: its id derives from consumer, the tenant, the type and
// the causing event's id; causationid names the cause.
func NewResult(consumer, eventType string, cause event.Event, data any) (event.Event, error) {
	tenant := Tenant(cause)
	ev, err := buildEvent(DeriveID(consumer, tenant, eventType, "event:"+cause.ID()), eventType, tenant, "agentq/"+consumer, data)
	if err != nil {
		return ev, err
	}
	ev.SetExtension(ExtCausation, cause.ID())
	inheritTrace(&ev, cause)
	return ev, nil
}

// NewStateResult builds a result that carries the state of target after
// version observations (a per-target, monotonic version). Its id derives
// from consumer, tenant, type, target and version, so whichever copy or
// batch reaches that version publishes the same id; subscribers apply such
// results with compare-and-set on the version, so a repeated or stale one
// is a no-op. causationid names the latest event folded in, whose trace
// context the result carries.
func NewStateResult(consumer, eventType, tenant, target string, version int64, cause event.Event, data any) (event.Event, error) {
	ev, err := buildEvent(DeriveID(consumer, tenant, eventType, "state:"+target+"@"+strconv.FormatInt(version, 10)), eventType, tenant, "agentq/"+consumer, data)
	if err != nil {
		return ev, err
	}
	ev.SetExtension(ExtCausation, cause.ID())
	inheritTrace(&ev, cause)
	return ev, nil
}
