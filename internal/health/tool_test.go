package health

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// script drives one tool of a tenant of four (so the share cap allows
// two quarantines) through calls and deadlines, one second per call.
type script struct {
	t   *testing.T
	tn  *Tenant
	p   Params
	now time.Time
	log []Transition
}

func newScript(t *testing.T, p Params) *script {
	s := &script{t: t, tn: NewTenant(), p: p, now: simStart}
	for _, n := range []string{"a", "b", "c"} {
		s.tn.Register(n, p, s.now)
	}
	return s
}

func (s *script) calls(ok bool, n int) {
	for range n {
		s.now = s.now.Add(time.Second)
		s.log = append(s.log, s.tn.Observe("t", Calls, !ok, s.now, s.p)...)
	}
}

// wait lets time pass with no traffic, firing deadlines as timers would.
func (s *script) wait(d time.Duration) {
	end := s.now.Add(d)
	for {
		due, ok := s.tn.Deadlines()["t"]
		if !ok || due.After(end) {
			break
		}
		s.now = due.Add(100 * time.Millisecond) // the timer event's stream time
		s.log = append(s.log, s.tn.Expire("t", due, s.now, s.p)...)
	}
	s.now = end
}

func (s *script) path() string {
	var parts []string
	for _, tr := range s.log {
		parts = append(parts, string(tr.To))
	}
	return strings.Join(parts, ",")
}

func (s *script) last() Transition { return s.log[len(s.log)-1] }

func TestToolLifecycle(t *testing.T) {
	p := DefaultParams()
	t.Run("quarantine expires into probation, probation without traffic ends healthy", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		s.calls(false, 10)
		require.Equal(t, "warning,degraded,quarantined", s.path())
		q := s.last()
		require.Equal(t, 1, q.Offence)
		require.Equal(t, q.At.Add(p.QuarantineBase), q.Expires)
		s.wait(p.QuarantineBase + p.Probation + time.Second)
		require.Equal(t, "warning,degraded,quarantined,probation,healthy", s.path())
		require.Equal(t, "probation ended without failures", s.last().Reason)
	})
	t.Run("failing on probation quarantines again with offence + 1 and a longer term", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		s.calls(false, 10)
		s.wait(p.QuarantineBase)
		s.calls(false, 3)
		require.Equal(t, "warning,degraded,quarantined,probation,quarantined", s.path())
		require.Equal(t, 2, s.last().Offence)
		require.Equal(t, s.last().At.Add(2*p.QuarantineBase), s.last().Expires)
		require.Contains(t, s.last().Reason, "failed again on probation")
	})
	t.Run("healthy calls on probation recover it before the deadline", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		s.calls(false, 10)
		s.wait(p.QuarantineBase)
		s.calls(true, 40)
		require.Equal(t, "warning,degraded,quarantined,probation,healthy", s.path())
		require.Equal(t, "healthy on probation", s.last().Reason)
	})
	t.Run("offences decay while the tool stays healthy", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		s.calls(false, 10)
		s.wait(p.QuarantineBase + p.Probation + time.Second)
		s.calls(true, 30)
		s.calls(false, 10) // soon after: a repeat offence
		require.Equal(t, 2, s.last().Offence)
		s.wait(2*p.QuarantineBase + p.Probation + time.Second)
		s.calls(true, 30)
		s.wait(3 * p.OffenceDecay) // healthy for three decay periods
		s.calls(false, 10)
		require.Equal(t, Quarantined, s.last().To)
		require.Equal(t, 1, s.last().Offence, "two offences forgiven: it starts fresh")
	})
	t.Run("quarantine length is capped", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		for range 30 {
			s.calls(false, 10)
			if s.last().To == Quarantined {
				s.wait(s.last().Expires.Sub(s.now))
			}
		}
		for _, tr := range s.log {
			if tr.To == Quarantined {
				require.LessOrEqual(t, tr.Expires.Sub(tr.At), p.QuarantineMax)
			}
		}
	})
	t.Run("a stale timer changes nothing", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		s.calls(false, 10)
		due := s.tn.Deadlines()["t"]
		require.Empty(t, s.tn.Expire("t", due.Add(-time.Second), due, p))
		require.Empty(t, s.tn.Expire("nobody", due, due, p))
		require.Equal(t, Quarantined, s.tn.Tools["t"].State)
	})
	t.Run("release lifts only a quarantine", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(true, 50)
		_, err := s.tn.Release("t", "why", s.now, p)
		require.ErrorContains(t, err, "is healthy, not quarantined")
		_, err = s.tn.Release("ghost", "why", s.now, p)
		require.ErrorContains(t, err, "unknown to the degrader")
		s.calls(false, 10)
		trs, err := s.tn.Release("t", "released by ops: fixed", s.now, p)
		require.NoError(t, err)
		require.Equal(t, Probation, trs[0].To)
		require.Equal(t, 0, s.tn.Quarantined)
	})
	t.Run("a new tool is never quarantined before MinCalls outcomes", func(t *testing.T) {
		s := newScript(t, p)
		s.calls(false, p.MinCalls-1)
		require.NotContains(t, s.path(), "quarantined")
		require.Equal(t, Degraded, s.tn.Tools["t"].State)
		s.calls(false, 1)
		require.Equal(t, Quarantined, s.last().To)
	})
	t.Run("a tool that was always bad is flagged by the absolute floor", func(t *testing.T) {
		pp := p
		pp.MaxQuarantinedShare = 0 // watch the alert alone
		s := newScript(t, pp)
		for range 100 {
			s.calls(true, 1)
			s.calls(false, 3)
		}
		require.Equal(t, Degraded, s.tn.Tools["t"].State)
		require.True(t, s.tn.Tools["t"].HeldBack)
	})
}

func TestValidateParams(t *testing.T) {
	require.NoError(t, DefaultParams().Validate())
	for _, tc := range []struct {
		name string
		mod  func(*Params)
		want string
	}{
		{"evidence", func(p *Params) { p.FastEvidence = 0 }, "fast evidence"},
		{"share", func(p *Params) { p.MaxQuarantinedShare = 1.5 }, "max quarantined share"},
		{"shift", func(p *Params) { p.Shift = 0.7 }, "shift"},
		{"max below base", func(p *Params) { p.QuarantineMax = time.Second }, "quarantine max"},
		{"quarantine multiple", func(p *Params) { p.QuarantineAt = 0.5 }, "quarantine multiple"},
		{"after", func(p *Params) { p.QuarantineAfter = 0 }, "quarantine-after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.mod(&p)
			require.ErrorContains(t, p.Validate(), tc.want)
		})
	}
}
