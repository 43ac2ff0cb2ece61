package service

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentq/agentq/internal/bus"
)

// metrics are the instruments shared by every Service on one registerer.
type metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "requests_total",
			Help: "Requests answered by request/reply services, by reply code (ok for success).",
		}, []string{"service", "endpoint", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentq", Name: "request_seconds",
			Help:    "Time from taking a request off the subscription to sending its reply.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. 3.3s, past the default 2s timeout
		}, []string{"service", "endpoint"}),
	}
	if reg != nil {
		m.requests = bus.Register(reg, m.requests)
		m.seconds = bus.Register(reg, m.seconds)
	}
	return m
}

// endpointMetrics holds one endpoint's series, resolved once rather than
// per request, and reply counts by code for micro's STATS verb.
type endpointMetrics struct {
	service, endpoint string
	m                 *metrics
	seconds           prometheus.Observer

	mu     sync.Mutex
	byCode map[string]prometheus.Counter
	counts map[string]int64
}

func (m *metrics) forEndpoint(service, endpoint string) *endpointMetrics {
	em := &endpointMetrics{
		service: service, endpoint: endpoint, m: m,
		seconds: m.seconds.WithLabelValues(service, endpoint),
		byCode:  map[string]prometheus.Counter{},
		counts:  map[string]int64{},
	}
	for _, code := range []string{codeOK, CodeBadRequest, CodeNotFound, CodeUnavailable, CodeTimeout, CodeInternal, CodeRendering, CodeRenderLimit, CodeOverloaded, CodeTooLarge} {
		em.byCode[code] = m.requests.WithLabelValues(service, endpoint, code)
	}
	return em
}

func (em *endpointMetrics) observe(code string, seconds float64) {
	em.seconds.Observe(seconds)
	em.mu.Lock()
	c, ok := em.byCode[code]
	if !ok { // a code of a handler's own, via Errorf
		c = em.m.requests.WithLabelValues(em.service, em.endpoint, code)
		em.byCode[code] = c
	}
	em.counts[code]++
	em.mu.Unlock()
	c.Inc()
}

// snapshot returns the reply counts by code.
func (em *endpointMetrics) snapshot() map[string]int64 {
	em.mu.Lock()
	defer em.mu.Unlock()
	out := make(map[string]int64, len(em.counts))
	for k, v := range em.counts {
		out[k] = v
	}
	return out
}
