package rating

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentq/agentq/internal/bus"
)

// metrics are the rater's own Prometheus instruments; the runner's
// (acks, naks, dead letters) are kept by package bus.
type metrics struct {
	ratings    *prometheus.CounterVec // by kind
	skipped    *prometheus.CounterVec // by reason
	fallbacks  *prometheus.CounterVec // by reason
	tokens     prometheus.Counter
	llmSeconds prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ratings := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Subsystem: "rater", Name: "ratings_total",
		Help: "Ratings stored and published, by rater kind (llm or rules).",
	}, []string{"kind"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Subsystem: "rater", Name: "skipped_total",
		Help: "Events acked without a rating, by reason: self_rated, not_sampled, no_output, budget.",
	}, []string{"reason"})
	fallbacks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Subsystem: "rater", Name: "fallbacks_total",
		Help: "Events the rules rated although an LLM is configured, by reason: injection, rejected, bad_output.",
	}, []string{"reason"})
	tokens := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "agentq", Subsystem: "rater", Name: "tokens_total",
		Help: "LLM tokens spent on stored ratings.",
	})
	llmSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "agentq", Subsystem: "rater", Name: "llm_seconds",
		Help:    "Wall time of one event's LLM work (summary, rating, retries).",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
	})
	if reg != nil {
		ratings = bus.Register(reg, ratings)
		skipped = bus.Register(reg, skipped)
		fallbacks = bus.Register(reg, fallbacks)
		tokens = bus.Register(reg, tokens)
		llmSeconds = bus.Register(reg, llmSeconds)
	}
	// Export zeros from the start, for dashboards and alerts.
	for _, k := range []string{KindLLM, KindRules} {
		ratings.WithLabelValues(k)
	}
	for _, r := range []string{SkipSelfRated, SkipNotSampled, SkipNoOutput, SkipBudget} {
		skipped.WithLabelValues(r)
	}
	for _, r := range []string{"injection", "rejected", "bad_output"} {
		fallbacks.WithLabelValues(r)
	}
	return &metrics{ratings: ratings, skipped: skipped, fallbacks: fallbacks, tokens: tokens, llmSeconds: llmSeconds}
}
