package search

import "github.com/jackc/pgx/v5"

// PreparedNames returns the names of c's prepared search statements, the
// most recently used first.
func PreparedNames(c *pgx.Conn) []string {
	st, ok := c.PgConn().CustomData()[statementsKey].(*statements)
	if !ok {
		return nil
	}
	var names []string
	for e := st.order.Front(); e != nil; e = e.Next() {
		names = append(names, e.Value.(*prepared).name)
	}
	return names
}

// IndexLock is the advisory lock index creation and maintenance take.
const IndexLock = indexLock

// RunsApart returns how many of s's searches ran their arms apart.
func (s *Searcher) RunsApart() int64 { return s.runsApart.Load() }

// HoldApart takes s's slots for running apart, as searches running apart
// would, until release is called.
func (s *Searcher) HoldApart() (release func()) {
	n := 0
	for s.takeApart() {
		n++
	}
	return func() {
		for range n {
			s.releaseApart()
		}
	}
}

// RawFullTextQueries makes searches give the query to the full-text arm as
// it is, as before runs of "-" were read as word breaks, until restore is
// called: the way to a query Postgres refuses.
func RawFullTextQueries() (restore func()) {
	fullTextForm = func(q string) string { return q }
	return func() { fullTextForm = fullTextQuery }
}
