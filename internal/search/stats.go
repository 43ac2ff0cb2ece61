package search

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query returning one row: a pool, or a connection.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// foldBatch is how many logged changes one fold statement moves.
const foldBatch = 5000

// FoldStats moves the logged changes of BM25's statistics into
// search_corpus and search_lexemes (migration 00011), each statement a
// short transaction of its own, until the log is empty or held by other
// folders, and returns how many it moved. Searches read the log too, so
// folding changes no result; it keeps the log, which every search reads,
// short. Writers call it after they commit; copies folding at once take
// disjoint changes. Called in a transaction, it folds in that
// transaction, holding what it folded until it ends.
func FoldStats(ctx context.Context, db Querier) (int, error) {
	total := 0
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT agentq_search_fold($1)`, foldBatch).Scan(&n); err != nil {
			return total, fmt.Errorf("search: fold statistics: %w", err)
		}
		total += n
		if n < foldBatch {
			return total, nil
		}
	}
}
