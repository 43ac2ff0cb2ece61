package search

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
)

// TestPromptCache: what each change drops, and what it keeps.
func TestPromptCache(t *testing.T) {
	k := func(tenant, id string, version int, label string) getKey {
		return getKey{tenant: tenant, id: id, version: version, label: label}
	}
	p := func(tenant, id string, version int) library.Prompt {
		return library.Prompt{Tenant: tenant, ID: id, Version: version}
	}
	a1, a2, b1 := k("acme", "greet", 1, ""), k("acme", "greet", 0, "production"), k("beta", "greet", 0, "")
	other := k("acme", "other", 0, "")
	for _, tc := range []struct {
		name   string
		change func(c *promptCache, clock *time.Time)
		kept   []getKey
	}{
		{"nothing", func(*promptCache, *time.Time) {}, []getKey{a1, a2, b1, other}},
		{"a tenant's id changed", func(c *promptCache, _ *time.Time) { c.invalidate("acme", "greet") }, []getKey{b1, other}},
		{"another tenant's id changed", func(c *promptCache, _ *time.Time) { c.invalidate("gamma", "greet") }, []getKey{a1, a2, b1, other}},
		{"a _global id changed: every tenant reads it afresh", func(c *promptCache, _ *time.Time) { c.invalidate("_global", "greet") }, []getKey{other}},
		{"flush", func(c *promptCache, _ *time.Time) { c.flush() }, nil},
		{"just before the TTL", func(_ *promptCache, clock *time.Time) { *clock = clock.Add(time.Minute - time.Nanosecond) }, []getKey{a1, a2, b1, other}},
		{"the TTL passed", func(_ *promptCache, clock *time.Time) { *clock = clock.Add(time.Minute) }, nil},
		{"reconnected", func(c *promptCache, _ *time.Time) { c.epochSeen-- }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Unix(1e9, 0)
			c := newPromptCache(10, time.Minute)
			c.now = func() time.Time { return clock }
			var reconnects uint64 = 7
			c.epoch, c.epochSeen = func() uint64 { return reconnects }, reconnects
			all := []getKey{a1, a2, b1, other}
			for _, key := range all {
				_, _, gen, ok := c.get(key)
				require.False(t, ok)
				c.put(key, p(key.tenant, key.id, key.version), nil, gen)
			}
			tc.change(c, &clock)
			for _, key := range all {
				got, _, _, ok := c.get(key)
				want := false
				for _, x := range tc.kept {
					want = want || x == key
				}
				require.Equal(t, want, ok, "%+v", key)
				if ok {
					require.Equal(t, p(key.tenant, key.id, key.version), got)
				}
			}
		})
	}
}

// TestPromptCacheStaleRead: an answer read before a change is not stored
// after it; the least recently used entry goes first.
func TestPromptCacheStaleRead(t *testing.T) {
	c := newPromptCache(2, time.Minute)
	key := getKey{tenant: "acme", id: "greet"}
	_, _, gen, _ := c.get(key)
	c.invalidate("acme", "greet") // a label moved while the read was in flight
	c.put(key, library.Prompt{ID: "greet", Version: 1}, nil, gen)
	_, _, _, ok := c.get(key)
	require.False(t, ok, "the read from before the change is not kept")

	x, y, z := getKey{tenant: "t", id: "x"}, getKey{tenant: "t", id: "y"}, getKey{tenant: "t", id: "z"}
	for _, key := range []getKey{x, y} {
		_, _, gen, _ := c.get(key)
		c.put(key, library.Prompt{ID: key.id}, nil, gen)
	}
	_, _, _, ok = c.get(x) // x is now the most recent
	require.True(t, ok)
	_, _, gen, _ = c.get(z)
	c.put(z, library.Prompt{ID: "z"}, nil, gen)
	for key, want := range map[getKey]bool{x: true, y: false, z: true} {
		_, _, _, ok := c.get(key)
		require.Equal(t, want, ok, key.id)
	}
	require.Len(t, c.byID, 2, "the evicted entry leaves no index behind")

	require.Nil(t, newPromptCache(-1, time.Minute), "disabled")
	var off *promptCache
	_, _, _, ok = off.get(x)
	require.False(t, ok)
	off.put(x, library.Prompt{}, nil, 0)
	off.invalidate("t", "x")
	off.flush()
}
