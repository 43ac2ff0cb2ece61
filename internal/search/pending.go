package search

import (
	"context"
	"fmt"
)

// Full text is found through GIN indexes with fastupdate on: an insert
// appends its row's lexemes to the index's pending list, and the list is
// merged into the index proper when it outgrows gin_pending_list_limit
// (4 MB), by the insert that overflows it, or by vacuum. Every search
// reads the whole pending list. Measured after indexing 100,000 prompts
// (native PostgreSQL 15, agentq bench indexer --search-only, 400 requests
// at concurrency 1): a list of 364 pages (2,060 rows) left by the last
// batches took the full-text arm from 3.5 to 6.9 ms p50 and the prompt
// search from 8.2 to 13.4 ms, and it stays until autovacuum gets to the
// table. Merging it soon after the writes (FlushPendingLists) gives
// searches the merged index and keeps the merge off the writers' path.
// A smaller gin_pending_list_limit (128 kB) did the same for searches but
// cost the writers a fifth to a third of their rate (1,049 against 1,333–1,578
// prompts/s).

// FlushPendingLists merges the pending lists of prompts' and tools' GIN
// indexes into the indexes and returns how many pages they held.
func FlushPendingLists(ctx context.Context, db Querier) (int64, error) {
	var pages int64
	err := db.QueryRow(ctx, `
SELECT coalesce(sum(gin_clean_pending_list(i.indexrelid)), 0)::bigint
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
WHERE am.amname = 'gin' AND i.indisvalid AND i.indrelid IN ('prompts'::regclass, 'tools'::regclass)`).Scan(&pages)
	if err != nil {
		return 0, fmt.Errorf("search: merge the full-text indexes' pending lists: %w", err)
	}
	return pages, nil
}
