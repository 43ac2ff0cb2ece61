package lab

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

func TestHoldOut(t *testing.T) {
	qs := func(n int) []Query {
		out := make([]Query, n)
		for i := range out {
			out[i] = Query{Query: fmt.Sprintf("q%d", i)}
		}
		return out
	}
	for _, tc := range []struct {
		n     int
		share float64
		want  int
	}{
		{0, 0.3, 0}, {1, 0.3, 0}, {2, 0.3, 1}, {5, 0.3, 2}, {6, 0.3, 2}, {10, 0.3, 3},
		{2, 0.9, 1}, {10, 0.9, 9}, {10, 0, 0}, {3, 0.1, 1},
	} {
		got := holdOut("exp", qs(tc.n), tc.share)
		require.Len(t, got, tc.want, "%d queries, share %v", tc.n, tc.share)
		require.True(t, slices.IsSorted(got))
		require.Equal(t, got, holdOut("exp", qs(tc.n), tc.share), "the same experiment holds out the same queries")
	}
	// The choice owes nothing to the order of the queries.
	a := qs(20)
	b := slices.Clone(a)
	slices.Reverse(b)
	var fromA, fromB []string
	for _, i := range holdOut("exp", a, 0.3) {
		fromA = append(fromA, a[i].Query)
	}
	for _, i := range holdOut("exp", b, 0.3) {
		fromB = append(fromB, b[i].Query)
	}
	require.ElementsMatch(t, fromA, fromB)
	require.NotEqual(t, holdOut("exp", a, 0.3), holdOut("other", a, 0.3), "another experiment draws others")
}

func TestPickStrategies(t *testing.T) {
	weak := []chat.Weakness{
		{Category: "off_topic", Samples: []int{0}},
		{Category: "no_tool_usage", Samples: []int{0, 1, 2}},
		{Category: "incorrect_info", Samples: []int{3}}, // suits grounding too: not twice
	}
	got := pickStrategies(weak, 3)
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"targeted_fix", "grounding", "scope_and_context"}, names)
	for n := 1; n <= 10; n++ {
		got := pickStrategies(nil, n)
		require.Len(t, got, n)
		seen := map[string]bool{}
		for _, s := range got {
			require.False(t, seen[s.Name], "strategy %s twice", s.Name)
			seen[s.Name] = true
		}
	}
}
