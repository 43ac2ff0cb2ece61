package lab_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/agentq/agentq/internal/provider/providertest"
)

// modelSim plays the model behind providertest. A trial's answer is the
// version's content (the system message) with {q} replaced by the query,
// so a test writes the answer it wants as the version. The judge scores by
// marker words in the response: "great" earns every point, "poor" almost
// none, anything else 80 %. Trials can be held at a gate; every call is
// counted by kind, trials also by (system, query).
type modelSim struct {
	mu      sync.Mutex
	gate    chan struct{}            // nil: open
	holdOn  map[string]chan struct{} // gates of single queries
	trials  map[string]int
	kinds   map[string]int
	waiting int
}

func newModelSim() *modelSim {
	return &modelSim{trials: map[string]int{}, kinds: map[string]int{}}
}

// Kinds of calls.
const (
	callTrial   = "trial"
	callJudge   = "judge"
	callSummary = "summary"
)

func kindOf(req providertest.ChatRequest) (kind, system, user string) {
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content
		}
	}
	switch {
	case strings.Contains(system, "## Rubric"):
		return callJudge, system, user
	case strings.Contains(system, "Summary Instructions"):
		return callSummary, system, user
	}
	return callTrial, system, user
}

func (m *modelSim) respond(ctx context.Context, req providertest.ChatRequest) string {
	kind, system, user := kindOf(req)
	m.mu.Lock()
	m.kinds[kind]++
	gate := m.gate
	if g, ok := m.holdOn[user]; ok && kind == callTrial {
		gate = g
	}
	if kind == callTrial {
		m.trials[system+"\x00"+user]++
		if gate != nil {
			m.waiting++
		}
	}
	m.mu.Unlock()
	switch kind {
	case callJudge:
		return judgeAnswer(user)
	case callSummary:
		return "Version 2 passes more often; the sample is small."
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
	}
	if system == "EMPTY" {
		return "" // a model that answers nothing: an unusable answer
	}
	return strings.ReplaceAll(system, "{q}", user)
}

func judgeAnswer(user string) string {
	// The response under judgement is fenced after "## Response".
	resp := user
	if i := strings.Index(user, "## Response"); i >= 0 {
		resp = user[i:]
	}
	points, pass := 20, true
	switch {
	case strings.Contains(resp, "great"):
		points = 25
	case strings.Contains(resp, "poor"):
		points, pass = 5, false
	}
	return fmt.Sprintf(`{"criteria": {"helpfulness": %d, "accuracy": %d, "completeness": %d, "safety": %d}, "pass": %t, "reason": "judged"}`,
		points, points, points, points, pass)
}

// hold makes trial calls wait until release.
func (m *modelSim) hold() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gate = make(chan struct{})
}

// holdQuery makes the trial calls of one query wait until release.
func (m *modelSim) holdQuery(q string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holdOn == nil {
		m.holdOn = map[string]chan struct{}{}
	}
	m.holdOn[q] = make(chan struct{})
}

// release lets held trial calls, and later ones, answer.
func (m *modelSim) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gate != nil {
		close(m.gate)
		m.gate = nil
	}
	for q, g := range m.holdOn {
		close(g)
		delete(m.holdOn, q)
	}
}

func (m *modelSim) calls(kind string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kinds[kind]
}

// held is the number of trial calls waiting at the gate.
func (m *modelSim) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiting
}

// trialCalls returns the trial calls by (system, query).
func (m *modelSim) trialCalls() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.trials))
	for k, v := range m.trials {
		out[k] = v
	}
	return out
}
