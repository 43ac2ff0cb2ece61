package testenv

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/config"
)

// Process is an agentq process embedded in a test: the dependencies of
// app.Start and the consumers of app.Run, as a binary or agentq dev runs
// them. It satisfies conformance.Copy.
type Process struct {
	Deps *app.Deps
	// Done receives app.Run's result when the consumers stop.
	Done   chan error
	cancel context.CancelFunc
}

// StartProcess starts consumers with cfg; the process is stopped at
// cleanup if the test has not stopped or killed it.
func StartProcess(t testing.TB, cfg config.Config, name string, consumers ...app.Consumer) *Process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := app.Start(ctx, cfg, name, Logger(t))
	if err != nil {
		cancel()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Deps: d, Done: make(chan error, 1), cancel: cancel}
	go func() { p.Done <- app.Run(ctx, d, consumers...) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop shuts the process down gracefully.
func (p *Process) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.Done
	_ = p.Deps.Close(context.Background())
	p.cancel = nil
}

// Kill stops the process abruptly, as kill -9 would: its NATS connection
// is cut first, so whatever it committed last is never acked and comes
// back as a redelivery.
func (p *Process) Kill() {
	if p.cancel == nil {
		return
	}
	p.Deps.NC.Close()
	p.cancel()
	<-p.Done
	p.Deps.Pool.Close()
	p.cancel = nil
}

// Counter sums the series of the counter name whose labels include match
// (nil: every series).
func (p *Process) Counter(name string, match map[string]string) float64 {
	return CounterValue(p.Deps.Registry, name, match)
}

// CounterValue sums the series of the counter name in reg whose labels
// include match (nil: every series).
func CounterValue(reg prometheus.Gatherer, name string, match map[string]string) float64 {
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range match {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
