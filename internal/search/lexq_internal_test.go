package search

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

// TestOneLexemeQueries: which queries the full-text arm takes for one
// lexeme with no operator (lexq.one), so that it skips its all-words
// candidate query: the same lexeme repeated or among stop words is one;
// two lexemes, a negation, an OR or a phrase are not.
func TestOneLexemeQueries(t *testing.T) {
	ctes := promptTuning.lexCTEs(promptKind, "true")
	for _, c := range []struct {
		query string
		one   bool
	}{
		{"ledger", true},
		{"ledger ledger", true},
		{"the ledgers of it", true},
		{"Ledger!", true},
		{"ledger invoice", false},
		{"-ledger", false},
		{"ledger or invoice", false},
		{`"ledger invoice"`, false},
		{"ledger -invoice", false},
		{"the of", false}, // no lexeme at all
	} {
		sql, args := bind("WITH "+ctes[0]+"\nSELECT one FROM lexq", map[string]any{"query": c.query})
		var one bool
		require.NoError(t, testenv.Pool(t).QueryRow(context.Background(), sql, args...).Scan(&one), c.query)
		require.Equal(t, c.one, one, c.query)
	}
}
