package bus

import (
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The patterns ValidTenant and splitType check byte by byte.
var (
	tenantPattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	typePattern   = regexp.MustCompile(`^agentq\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.v([0-9]+)$`)
)

// TestValidTenantAndTypeMatchTheirPatterns holds the hand-written checks to
// the regular expressions they replace, on chosen cases and on random
// strings over the alphabet that matters.
func TestValidTenantAndTypeMatchTheirPatterns(t *testing.T) {
	cases := []string{
		"", "a", "acme", "_global", "a-b_c9", "A", "acme\n", "acme ", "é", "a.b",
		string(make([]byte, 64)), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"agentq.tool.executed.v1", "agentq.tool.executed.v", "agentq.tool.executed.v1x", "agentq.tool.executed.v12",
		"agentq.tool_x.exec_2.v0", "agentq.1tool.executed.v1", "agentq.tool._x.v1", "agentq..executed.v1",
		"agentq.tool.executed", "agentq.tool.executed.v1\n", "xagentq.tool.executed.v1", "agentq.tool.executed.1",
		"agentq.Tool.executed.v1", "agentq.tool.executed.extra.v1", "agentq.tool.v1", "agentq.a.b.v1",
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "agentq.toolexcud_v019-A \n."
	for range 20000 {
		b := make([]byte, r.IntN(30))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b), "agentq."+string(b))
	}
	// Types assembled from pieces, valid and not.
	words := []string{"", "a", "tool", "t_1", "z9", "1a", "_x", "A", "é", "a.b", "a-b", " a"}
	versions := []string{"v1", "v", "v12", "1", "vx", "v1\n", "v0", "V1", "v1.v2"}
	prefixes := []string{"agentq.", "agentq", "Agentq.", "xagentq.", ""}
	for range 20000 {
		cases = append(cases, prefixes[r.IntN(len(prefixes))]+words[r.IntN(len(words))]+"."+
			words[r.IntN(len(words))]+"."+versions[r.IntN(len(versions))])
	}
	types := 0
	for _, c := range cases {
		require.Equal(t, tenantPattern.MatchString(c), ValidTenant(c), "tenant %q", c)
		m := typePattern.FindStringSubmatch(c)
		if m != nil {
			types++
		}
		domain, name, ok := splitType(c)
		require.Equal(t, m != nil, ok, "type %q", c)
		if m != nil {
			require.Equal(t, []string{m[1], m[2]}, []string{domain, name}, "type %q", c)
		}
	}
	require.Greater(t, types, 100, "the random strings reach valid types too")
}
