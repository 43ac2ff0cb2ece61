package search

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestListsAndRebuild(t *testing.T) {
	for _, c := range []struct {
		rows, lists int
		rebuildFrom map[int]bool // lists of an existing index: rebuilt?
	}{
		{rows: 0, lists: 1, rebuildFrom: map[int]bool{1: false, 2: true, 3: true}},
		{rows: 799, lists: 1, rebuildFrom: map[int]bool{1: false}},
		{rows: 800, lists: 2, rebuildFrom: map[int]bool{1: true, 2: false, 3: false, 4: true}},
		{rows: 20000, lists: 50, rebuildFrom: map[int]bool{33: true, 34: false, 50: false, 99: false, 100: true}},
		{rows: 1 << 30, lists: maxLists, rebuildFrom: map[int]bool{maxLists: false}},
	} {
		require.Equal(t, c.lists, ListsFor(c.rows), "rows %d", c.rows)
		for from, want := range c.rebuildFrom {
			require.Equal(t, want, rebuild(from, c.lists), "rows %d, index of %d lists", c.rows, from)
		}
	}
}

func TestVectorSettings(t *testing.T) {
	for _, c := range []struct {
		m         Method
		iterative bool
		want      []any
	}{
		{HNSW, false, []any{"hnsw.ef_search", "64"}},
		{HNSW, true, []any{"hnsw.ef_search", "64", "hnsw.iterative_scan", "relaxed_order"}},
		{IVFFlat, false, []any{"ivfflat.probes", "10"}},
		{IVFFlat, true, []any{"ivfflat.probes", "10", "ivfflat.iterative_scan", "relaxed_order", "ivfflat.max_probes", "50"}},
	} {
		require.Equal(t, c.want, vectorSettings(c.m, 20, 64, 10, c.iterative), "%s %v", c.m, c.iterative)
	}
	require.Equal(t, []any{"hnsw.ef_search", "100"}, vectorSettings(HNSW, 100, 64, 10, false), "raised to K")
	require.Equal(t, []any{"ivfflat.probes", "80"}, vectorSettings(IVFFlat, 100, 64, 80, false)[:2])
}

// indexDimension reads the dimension back from the names IndexName and
// IVFFlatName give, for that table and model only.
func TestIndexDimension(t *testing.T) {
	const model = "text-0-embed" // a slug holding "_0_"
	for _, c := range []struct {
		name, table, model string
		dim                int
		ok                 bool
	}{
		{IndexName("tools", model, 8), "tools", model, 8, true},
		{IndexName("prompts", model, 1536), "prompts", model, 1536, true},
		{IVFFlatName("prompts", model, 16, 50), "prompts", model, 16, true},
		{IVFFlatName("prompts", model, 16, 50) + rebuiltSuffix, "prompts", model, 16, true},
		{IndexName("tools", model, 8), "prompts", model, 0, false},       // another table's
		{IndexName("tools", model, 8), "tools", model + "-v2", 0, false}, // another model's
		{IndexName("tools", "text-0-embed-x", 8), "tools", model, 0, false},
		{IVFFlatName("prompts", model, 16, 50) + "x", "prompts", model, 0, false},
		{"prompts_pkey", "prompts", model, 0, false},
		{IndexName("tools", model, 8) + "_l3", "tools", model, 0, false}, // an HNSW name with lists
	} {
		d, ok := indexDimension(c.name, c.table, c.model)
		require.Equal(t, c.ok, ok, c.name)
		require.Equal(t, c.dim, d, c.name)
	}
}
