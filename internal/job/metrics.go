package job

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentq/agentq/internal/bus"
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
			Help: "Attempts whose lease another worker had taken over when they ended; they wrote nothing.",
		}, []string{"consumer"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentq", Name: "job_attempt_seconds",
			Help:    "Time from an attempt's lease to its outcome.",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
		}, []string{"consumer"}),
	}
	if reg != nil {
		m.leased = bus.Register(reg, m.leased)
		m.finished = bus.Register(reg, m.finished)
		m.released = bus.Register(reg, m.released)
		m.leaseLost = bus.Register(reg, m.leaseLost)
		m.runTime = bus.Register(reg, m.runTime)
	}
	return m
}
