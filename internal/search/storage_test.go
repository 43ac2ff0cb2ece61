package search_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// TestSearchTextIsReadFromTheRow checks where a prompt's and a tool's
// columns are stored (migration 00012): reading the search text of a
// ~6 kB row costs no buffer beyond the row's own, while reading its
// embedding, which goes to TOAST, does (the control: it shows the
// measurement sees an out-of-line value). Full-text search reads the
// search text of every candidate.
func TestSearchTextIsReadFromTheRow(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	tenant, w := testenv.Tenant(t), word(t)
	// The shape of a real prompt: ~160 words over ~80 distinct ones, a
	// ~1 kB tsvector beside ~1.2 kB of content and a 4 kB vector.
	vocabulary := strings.Fields(`review reconcile ledger invoice customer account balance payment refund
		report summary quarter revenue expense budget forecast variance approval policy contract vendor
		supplier shipment order delivery warehouse inventory stock return damage claim insurance premium
		coverage deductible adjuster estimate repair schedule appointment calendar meeting agenda minutes
		action owner deadline priority escalation incident outage latency error retry timeout database
		index query migration backup restore snapshot replica cluster region tenant project release
		changelog version feature regression bisect commit branch merge pipeline deploy rollback canary`)
	var words []string
	for i := range 160 {
		words = append(words, vocabulary[i%len(vocabulary)])
	}
	content := w + " " + strings.Join(words, " ")
	f.prompt(promptSpec{tenant: tenant, id: "long-" + w, content: content})
	f.tool(tenant, "long_"+w, content, time.Time{})

	// buffers runs sql under EXPLAIN (ANALYZE, BUFFERS) and returns the
	// shared buffers its execution touched.
	buffers := func(sql string, args ...any) int {
		t.Helper()
		var out []byte
		require.NoError(t, f.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out))
		var plan []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			} `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(out, &plan), string(out))
		require.Len(t, plan, 1)
		return plan[0].Plan.Hit + plan[0].Plan.Read
	}
	for _, c := range []struct{ table, where, key, plain string }{
		{"prompts", "tenant_id = $1 AND id = $2 AND version = 1", "long-" + w, "created_at"},
		{"tools", "tenant_id = $1 AND name = $2", "long_" + w, "registered_at"},
	} {
		read := func(col string) int {
			// Twice: the first run may also load the catalog's pages.
			buffers(`SELECT `+col+` FROM `+c.table+` WHERE `+c.where, tenant, c.key)
			return buffers(`SELECT `+col+` FROM `+c.table+` WHERE `+c.where, tenant, c.key)
		}
		row := read(c.plain + " IS NULL") // a column of the row itself
		require.Equal(t, row, read("length(search_text)"), "%s: reading search_text touches buffers beyond the row's (TOAST)", c.table)
		require.Greater(t, read("vector_dims(embedding)"), row, "%s: the embedding should be out of line (control)", c.table)
	}
}
