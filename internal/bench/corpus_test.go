package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The corpus is a function of its options and seed (--search-only relies
// on generating a tenant's corpus again), prompts are about 130 words with
// a {{.Param}} marker per parameter, and prompts past the number of ids are
// new versions of the earlier ones.
func TestCorpus(t *testing.T) {
	o := IndexerOptions{Prompts: 40, PromptIDs: 10, Tools: 15, Seed: 7}
	a, b := newBenchCorpus(o), newBenchCorpus(o)
	require.Len(t, a.prompts, 40)
	require.Len(t, a.ids, 10)
	require.Len(t, a.tools, 15)
	for i := range a.prompts {
		require.Equal(t, a.promptData(i), b.promptData(i))
	}
	for i := range a.tools {
		require.Equal(t, a.toolData(i), b.toolData(i))
	}
	o.Seed = 8
	require.NotEqual(t, a.promptData(0), newBenchCorpus(o).promptData(0))

	require.InDelta(t, 130, a.meanWords(), 30)
	for i, p := range a.prompts {
		require.Equal(t, i%10, p.id, "prompt %d", i)
		for _, param := range a.ids[p.id].params {
			require.Contains(t, p.content, "{{."+param.Name+"}}", "prompt %d", i)
		}
	}
	require.NotEqual(t, a.prompts[0].content, a.prompts[10].content, "the second version is edited")
	require.Equal(t, a.prompts[0].id, a.prompts[10].id)
	for i := range a.tools {
		require.NotEmpty(t, strings.Fields(a.toolText(i)))
	}
}
