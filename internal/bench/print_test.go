package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tables `agentq bench` and `agentq bench degrader` print; scripts and
// the README's figures read them.
func TestScorerAndDegraderTables(t *testing.T) {
	var out strings.Builder
	ScorerResult{Events: 300, Rounds: 2, BatchSize: 100, Database: "AGENTQ_DATABASE_URL",
		PublishRate: 1579.4, RawRate: 12729, ScorerRate: 433, RoundRatios: []float64{0.034, 0.05},
		CeilingRate: 2561, CeilingRatios: []float64{0.169, 0.2}, RawE2ERate: 35577, ScorerE2ERate: 2052,
		LightP50: 28 * time.Millisecond, LightP99: 31512400 * time.Nanosecond, LightSamples: 3,
	}.Print(&out)
	require.Equal(t, `agentq bench: 300 events per phase, 2 rounds (medians), scorer batch 100, database: AGENTQ_DATABASE_URL
  publish (async, acked)                        1579 events/s
  draining a backlog (consume only):
    raw JetStream consume + ack                12729 events/s
    scorer consume → commit → ack                433 events/s
    scorer / raw                                 3.4 %   (per round: 3.4% 5.0%)
    Postgres ceiling: inbox + upsert only       2561 events/s   (one pipelined transaction per batch, no NATS)
    scorer / ceiling                            16.9 %   (per round: 16.9% 20.0%)
  end to end, publishing and consuming at once (first publish → last ack / commit):
    raw JetStream publish + consume + ack      35577 events/s
    scorer published → committed                2052 events/s
    scorer / raw                                 5.8 %
  light traffic, publish → quality.changed: p50 28ms, p99 31.512ms (3 events, one at a time)
`, out.String())

	out.Reset()
	DegraderResult{Tools: 20, Samples: 5, Gap: 20 * time.Millisecond, Database: "AGENTQ_DATABASE_URL",
		QuarantineP50: 18390 * time.Microsecond, QuarantineP99: 83170 * time.Microsecond,
		WebhookP50: 18990 * time.Microsecond, WebhookP99: 84940 * time.Microsecond,
		AnchorP50: 120 * time.Microsecond, AnchorP99: 570 * time.Microsecond,
		CommitsP50: 2100 * time.Microsecond, CommitsP99: 41250 * time.Microsecond,
	}.Print(&out)
	require.Equal(t, `degrader, 20 tools, 5 broken one at a time, 20ms between calls (AGENTQ_DATABASE_URL)
  tool.executed → tool.quarantined on the stream  p50  18.39 ms  p99  83.17 ms
  tool.executed → webhook POST received           p50  18.99 ms  p99  84.94 ms
  anchor: publish → plain pull consumer           p50   0.12 ms  p99   0.57 ms
  anchor: two single-row commits, between samples p50   2.10 ms  p99  41.25 ms
`, out.String())
}
