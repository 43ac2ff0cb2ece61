package search

import (
	"context"
	"testing"

	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/testenv"
)

// TestQueryVectorIsTheCastOfItsText: the query vector search sends in
// binary, as a half vector, is the value the server's cast of its text
// gives (what search sent before), for every query of the evaluation
// sets; so the arm's distances and ranks are unchanged.
func TestQueryVectorIsTheCastOfItsText(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	var queries []string
	for _, f := range []string{"tools.json", "prompts.json"} {
		s, err := LoadEvalSet("../embed/testdata/"+f, "")
		require.NoError(t, err)
		for _, q := range s.Queries {
			queries = append(queries, q.Text)
		}
	}
	require.NotEmpty(t, queries)
	vecs, err := embed.Lexical{}.Embed(ctx, queries)
	require.NoError(t, err)
	for i, v := range vecs {
		p := plan{vec: v}
		var same bool
		var binary, text string
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::halfvec = $2::text::halfvec, $1::halfvec::text, $2::text::halfvec::text`,
			p.vector(), pgvector.NewVector(v).String()).Scan(&same, &binary, &text), queries[i])
		require.True(t, same, "%s:\nbinary %s\ntext   %s", queries[i], binary, text)
	}
}
