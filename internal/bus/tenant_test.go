package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// A subject whose tenant token is not a tenant id is a tenant problem, not
// an unknown type: its dead letter says tenant_mismatch and why, whether
// the tenantid extension agrees with the token or not.
func TestBadTenantTokenIsTenantMismatch(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx := context.Background()
	long := strings.Repeat("a", 65)
	for _, token := range []string{"ACME", "acme!", long} {
		t.Run(token[:min(len(token), 8)], func(t *testing.T) {
			m := nats.NewMsg("tool.executed." + token)
			m.Header = nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"bt-" + token}, "ce-source": {"test"},
				"ce-type": {"agentq.tool.executed.v1"}, "content-type": {"application/json"}, "ce-tenantid": {token}}
			m.Data = []byte(`{"tool_name":"x","success":true}`)
			ack, err := n.JS.PublishMsg(ctx, m)
			require.NoError(t, err)
			s, err := n.JS.Stream(ctx, bus.StreamName)
			require.NoError(t, err)
			cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: ack.Sequence})
			require.NoError(t, err)
			got, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			require.NoError(t, err)
			_, err = bus.Read(got, reg, 0)
			require.Error(t, err)
			require.Equal(t, bus.ReasonTenantMismatch, bus.ReasonOf(err), "%v", err)
			require.Contains(t, err.Error(), "is not a tenant id ([a-z0-9_-]{1,64})")
		})
	}
}
