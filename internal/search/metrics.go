package search

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
)

// Why a search ran without one of its arms: the reason label of
// agentq_search_arm_skipped_total.
const (
	// skipNoWords: the query has nothing the embedder can embed (no
	// letters or digits). A fact about the query, logged at debug.
	skipNoWords = "no_words"
	// skipEmbedderUnavailable and skipEmbedderTimeout: the embedding
	// provider failed or did not answer within EmbedTimeout (an outage).
	skipEmbedderUnavailable = "embedder_unavailable"
	skipEmbedderTimeout     = "embedder_timeout"
	// skipQueryRejected: Postgres's full-text parser refused the query
	// (a limit fullTextQuery does not know of).
	skipQueryRejected = "query_rejected"
)

// warnEvery is the least time between two warnings of one kind: searches
// are requests any client can send, one per search would let a client
// flood the log during an outage. The counter counts every one.
const warnEvery = 30 * time.Second

// metrics are the search's Prometheus instruments (the service's own
// request metrics are internal/service's).
type metrics struct {
	armSkipped *prometheus.CounterVec // by arm and reason
}

func newMetrics(reg prometheus.Registerer) *metrics {
	armSkipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Subsystem: "search", Name: "arm_skipped_total",
		Help: "Searches answered without one of their arms, by arm (vector, full_text) and reason: " +
			"no_words (nothing in the query to embed), embedder_unavailable, embedder_timeout, query_rejected (the full-text parser refused the query).",
	}, []string{"arm", "reason"})
	if reg != nil {
		armSkipped = bus.Register(reg, armSkipped)
	}
	// Export zeros from the start, for dashboards and alerts.
	for _, r := range []string{skipNoWords, skipEmbedderUnavailable, skipEmbedderTimeout} {
		armSkipped.WithLabelValues("vector", r)
	}
	armSkipped.WithLabelValues("full_text", skipQueryRejected)
	return &metrics{armSkipped: armSkipped}
}

// throttle lets one log line of each kind through per warnEvery, and
// counts the ones it held back, which the next line reports.
type throttle struct {
	mu   sync.Mutex
	now  func() time.Time
	last map[string]time.Time
	held map[string]int
}

func newThrottle() *throttle {
	return &throttle{now: time.Now, last: map[string]time.Time{}, held: map[string]int{}}
}

// warn returns a warning event for kind, carrying how many were held back
// since the last one, or nil (zerolog's disabled event) when one was
// logged less than warnEvery ago.
func (t *throttle) warn(log zerolog.Logger, kind string) *zerolog.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if last, ok := t.last[kind]; ok && now.Sub(last) < warnEvery {
		t.held[kind]++
		return nil
	}
	t.last[kind] = now
	held := t.held[kind]
	t.held[kind] = 0
	return log.Warn().Int("held_back", held).Dur("at_most_every", warnEvery)
}

// skipped counts a search that ran without arm, and logs it: at debug
// when the query caused it, else a throttled warning.
func (s *Searcher) skipped(arm, reason, model string, err error) {
	s.metrics.armSkipped.WithLabelValues(arm, reason).Inc()
	e := s.log.Debug()
	if reason != skipNoWords {
		e = s.warnings.warn(s.log, arm+"/"+reason)
	}
	msg := "query not embedded; searching by full text alone"
	if arm != "vector" {
		msg = "full-text arm refused the query; searching by vectors alone"
	}
	e.Err(err).Str("model", model).Str("reason", reason).Msg(msg)
}
