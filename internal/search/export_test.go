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
