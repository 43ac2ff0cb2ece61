package job

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the workers' Prometheus instruments, labelled by consumer.
type Metrics struct {
	leased    *prometheus.CounterVec
	finished  *prometheus.CounterVec
	released  *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	runTime   *prometheus.HistogramVec
}

// NewMetrics registers the workers' instruments with reg (nil: not
// registered). Registering twice with the same registry returns the
// instruments already registered, so many workers can share one.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "jobs_leased_total",
			Help: "Job leases taken: first runs, retries and takeovers of expired leases.",
		}, []string{"consumer"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "jobs_finished_total",
			Help: "Jobs that reached a terminal state, by state.",
		}, []string{"consumer", "state"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "jobs_released_total",
			Help: "Leases given back for a later attempt, by reason: error, outage, stop, store.",
		}, []string{"consumer", "reason"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "jobs_lease_lost_total",
			Help: "Attempts that lost their lease while running (taken over, or not renewed in time).",
		}, []string{"consumer"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentq", Name: "job_attempt_seconds",
			Help:    "Time from an attempt's lease to its outcome.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
		}, []string{"consumer"}),
	}
	if reg != nil {
		m.leased = register(reg, m.leased)
		m.finished = register(reg, m.finished)
		m.released = register(reg, m.released)
		m.leaseLost = register(reg, m.leaseLost)
		m.runTime = register(reg, m.runTime)
	}
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
