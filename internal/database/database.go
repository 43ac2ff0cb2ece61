// Package database opens agentq's Postgres (pgx/v5 pool with the pgvector
// types registered), applies the embedded migrations under an advisory lock,
// keeps the inbox that makes consumers' effects exactly-once, and classifies
// database errors as retry, outage or dead letter.
package database

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/migrations"
)

// Migrate applies every pending migration. Many processes may call it at
// once: a Postgres session advisory lock lets one apply while the others
// wait, then find nothing to do.
func Migrate(ctx context.Context, url string, log zerolog.Logger) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("migrate: parse database url: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Out of order is allowed: every migration is idempotent, and a
	// database may have met a later-numbered file first (parallel work).
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker), goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, r := range res {
		log.Info().Str("migration", r.Source.Path).Dur("took", r.Duration).Msg("migration applied")
	}
	return nil
}

// Open returns a pool on url with pgvector's types registered on every
// connection. Run Migrate first: registering fails until the vector
// extension exists.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		return pgxvec.RegisterTypes(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	return pool, nil
}

// Classify marks a database error for the runner: an unreachable database is
// an outage (bus.Unavailable, retried however long it lasts), bad data is
// permanent (bus.Permanent, dead-lettered), anything else is transient.
func Classify(err error) error {
	if err == nil || bus.IsPermanent(err) || bus.IsUnavailable(err) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) >= 2 && pgErr.Code[:2] == "08", // connection exception
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutdown, cannot connect now
			pgErr.Code == "53300": // too many connections
			return bus.Unavailable(err)
		case pgErr.Code == "23505", // unique violation: a concurrent insert of the same key; retrying sees it
			pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock: retry
			return err
		case len(pgErr.Code) >= 2 && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23"): // data, integrity
			return bus.Permanent(err)
		}
		return err
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) {
		return bus.Unavailable(err)
	}
	return err
}

// InboxKey names one event a consumer applied.
type InboxKey struct {
	Tenant  string
	EventID string
	// Seq is the stream sequence of the copy being claimed, or 0 when the
	// consumer's state does not depend on it. With Seq set, the inbox
	// records where the event was applied, and a claim by an earlier copy
	// of an event applied at a later sequence is reported in
	// Claimed.Moved.
	Seq uint64
}

// Claimed is what Claim learnt.
type Claimed struct {
	// Fresh reports, aligned with the claimed keys, whether each is new
	// (true) or was already applied (false) — including a repeat of an
	// earlier key in the same call. Of several copies of one event in the
	// same call, the one with the lowest Seq is the new one.
	Fresh []bool
	// Moved reports, aligned with the claimed keys, the stream sequence an
	// event was applied at when the key is an earlier copy of it (lower
	// Seq): the claim now records the key's Seq, and the consumer must
	// move the effect there, in the same transaction, as if the event had
	// been applied at Seq only. 0 otherwise: a later copy, a redelivery,
	// or a key or inbox row without a sequence, is a plain duplicate.
	Moved []uint64
	// withheld holds the tenants being rebuilt, "*" for all.
	withheld map[string]bool
}

// Withheld reports whether results for tenant must not be published: a
// rebuild of its state is in progress, so the state is incomplete (see
// StartRebuild). The effect is still applied.
func (c Claimed) Withheld(tenant string) bool {
	return c.withheld["*"] || c.withheld[tenant]
}

// EnsureFence creates consumer's fence row; call it once before the
// consumer's first batch, so a rebuild started later always finds the row
// that batches lock.
func EnsureFence(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, consumer string) error {
	if _, err := db.Exec(ctx, `INSERT INTO consumer_fences (consumer) VALUES ($1) ON CONFLICT DO NOTHING`, consumer); err != nil {
		return fmt.Errorf("ensure fence of %s: %w", consumer, err)
	}
	return nil
}

// Claim records keys in consumer's inbox inside tx and reports which are
// new, which are earlier copies of events applied at a later stream
// sequence, and which tenants' results are withheld by a rebuild in
// progress. Apply the effect only for new keys, move it for moved ones, in
// the same transaction, and ack after commit.
//
// Claim first reads the consumer's fence row FOR SHARE, so it waits for a
// rebuild that is resetting state and then sees that rebuild; its
// statements travel in one round trip, and a second one follows only when
// some key was applied before (a duplicate: rare), to learn whether it was
// applied at a later sequence. Keys are inserted, and rows to move locked,
// in sorted order, so two transactions claiming overlapping keys cannot
// deadlock.
func Claim(ctx context.Context, tx pgx.Tx, consumer string, keys []InboxKey) (Claimed, error) {
	b := &pgx.Batch{}
	q := queueClaim(b, consumer, keys)
	br := tx.SendBatch(ctx, b)
	c, err := q.read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c, err
	}
	return c, q.moves(ctx, tx, consumer, c)
}

// claim is one Claim's keys, reduced to one row per event.
type claim struct {
	keys []InboxKey
	// owner maps each distinct (tenant, event id) to the index in keys
	// that speaks for it: the copy with the lowest sequence, else the first.
	owner map[InboxKey]int
	// bySeq maps the sequence of each owner to its index when every owner
	// has a sequence of its own: the insert then returns sequences, not
	// tenants and ids (no strings to read back and hash again).
	bySeq map[int64]int
}

func queueClaim(b *pgx.Batch, consumer string, keys []InboxKey) *claim {
	q := &claim{keys: keys, owner: make(map[InboxKey]int, len(keys))}
	var tenantList []string
	tenantSeen := map[string]bool{}
	for i, k := range keys {
		if !tenantSeen[k.Tenant] {
			tenantSeen[k.Tenant] = true
			tenantList = append(tenantList, k.Tenant)
		}
		id := InboxKey{Tenant: k.Tenant, EventID: k.EventID}
		j, ok := q.owner[id]
		if !ok || k.Seq != 0 && (keys[j].Seq == 0 || k.Seq < keys[j].Seq) {
			q.owner[id] = i
		}
	}
	tenants := make([]string, 0, len(q.owner))
	ids := make([]string, 0, len(q.owner))
	seqs := make([]int64, 0, len(q.owner))
	bySeq := make(map[int64]int, len(q.owner))
	for _, i := range q.owner {
		tenants, ids, seqs = append(tenants, keys[i].Tenant), append(ids, keys[i].EventID), append(seqs, int64(keys[i].Seq))
		bySeq[int64(keys[i].Seq)] = i
	}
	if _, unknown := bySeq[0]; !unknown && len(bySeq) == len(q.owner) {
		q.bySeq = bySeq // every owner has a sequence of its own
	}
	returning := "tenant_id, event_id"
	if q.bySeq != nil {
		returning = "seq"
	}
	b.Queue(`SELECT 1 FROM consumer_fences WHERE consumer = $1 FOR SHARE`, consumer)
	b.Queue(`SELECT tenant_id FROM rebuilds WHERE consumer = $1 AND (tenant_id = '*' OR tenant_id = ANY($2))`, consumer, tenantList)
	b.Queue(`
		INSERT INTO inbox (consumer, tenant_id, event_id, seq)
		SELECT $1, t, e, nullif(s, 0) FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(t, e, s) ORDER BY t, e
		ON CONFLICT DO NOTHING
		RETURNING `+returning, consumer, tenants, ids, seqs)
	return q
}

func (q *claim) read(br pgx.BatchResults) (Claimed, error) {
	if _, err := br.Exec(); err != nil {
		return Claimed{}, fmt.Errorf("inbox fence: %w", err)
	}
	c := Claimed{Fresh: make([]bool, len(q.keys)), Moved: make([]uint64, len(q.keys))}
	rows, err := br.Query()
	if err != nil {
		return Claimed{}, fmt.Errorf("inbox rebuilds: %w", err)
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return Claimed{}, fmt.Errorf("inbox rebuilds: %w", err)
		}
		if c.withheld == nil {
			c.withheld = map[string]bool{}
		}
		c.withheld[t] = true
	}
	if err := rows.Err(); err != nil {
		return Claimed{}, fmt.Errorf("inbox rebuilds: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return Claimed{}, fmt.Errorf("inbox claim: %w", err)
	}
	for rows.Next() {
		if q.bySeq != nil {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return Claimed{}, fmt.Errorf("inbox claim: %w", err)
			}
			c.Fresh[q.bySeq[seq]] = true
			continue
		}
		var k InboxKey
		if err := rows.Scan(&k.Tenant, &k.EventID); err != nil {
			rows.Close()
			return Claimed{}, fmt.Errorf("inbox claim: %w", err)
		}
		c.Fresh[q.owner[k]] = true
	}
	if err := rows.Err(); err != nil {
		return Claimed{}, fmt.Errorf("inbox claim: %w", err)
	}
	return c, nil
}

// moves completes c for the keys the insert did not claim (applied
// before) and that name a sequence: one applied at a later sequence than
// this copy's is locked (FOR UPDATE waits for a concurrent move and reads
// its outcome), reported in c.Moved, and recorded at this copy's sequence.
// A key the insert claimed holds this copy's sequence already, so only the
// others are looked up, in a round trip of their own when there are any.
func (q *claim) moves(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, consumer string, c Claimed) error {
	var tenants, ids []string
	var seqs []int64
	for _, i := range q.owner {
		if k := q.keys[i]; !c.Fresh[i] && k.Seq != 0 {
			tenants, ids, seqs = append(tenants, k.Tenant), append(ids, k.EventID), append(seqs, int64(k.Seq))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(`
		SELECT i.tenant_id, i.event_id, i.seq
		FROM inbox i JOIN unnest($2::text[], $3::text[], $4::bigint[]) AS u(t, e, s)
		  ON i.consumer = $1 AND i.tenant_id = u.t AND i.event_id = u.e
		WHERE i.seq > u.s
		ORDER BY i.tenant_id, i.event_id
		FOR UPDATE OF i`, consumer, tenants, ids, seqs)
	b.Queue(`
		UPDATE inbox i SET seq = u.s
		FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(t, e, s)
		WHERE i.consumer = $1 AND i.tenant_id = u.t AND i.event_id = u.e AND i.seq > u.s`,
		consumer, tenants, ids, seqs)
	br := db.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("inbox move: %w", err)
	}
	for rows.Next() {
		var k InboxKey
		var was int64
		if err := rows.Scan(&k.Tenant, &k.EventID, &was); err != nil {
			rows.Close()
			return fmt.Errorf("inbox move: %w", err)
		}
		c.Moved[q.owner[k]] = uint64(was)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("inbox move: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("inbox move: %w", err)
	}
	return br.Close()
}

// Unit is a consumer's transaction for one batch, shaped for few round
// trips: BEGIN travels with the inbox claim (BeginClaim) and COMMIT with
// the last writes (Commit), so a batch of new events that reads its state
// once costs three round trips. Always call Close.
type Unit struct {
	conn *pgxpool.Conn
	open bool
}

// BeginClaim acquires a connection, begins a transaction and claims keys
// in consumer's inbox (see Claim), in one round trip when every key is new.
func BeginClaim(ctx context.Context, pool *pgxpool.Pool, consumer string, keys []InboxKey) (*Unit, Claimed, error) {
	return BeginClaimWith(ctx, pool, consumer, keys, nil)
}

// Rider is statements that travel with a claim, after it: Queue adds them
// to the batch, Read reads their results.
type Rider struct {
	Queue func(b *pgx.Batch)
	Read  func(br pgx.BatchResults) error
}

// BeginClaimWith is BeginClaim with the statements of also in the same
// round trip, after the claim's, so a consumer that locks or reads its
// state whatever the claim finds saves a round trip. They run before the
// move check of keys applied before (see Claim), whose rows they must not
// lock.
func BeginClaimWith(ctx context.Context, pool *pgxpool.Pool, consumer string, keys []InboxKey, also *Rider) (*Unit, Claimed, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, Claimed{}, fmt.Errorf("begin: %w", err)
	}
	u := &Unit{conn: conn, open: true}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	q := queueClaim(b, consumer, keys)
	if also != nil {
		also.Queue(b)
	}
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		u.Close(ctx)
		return nil, Claimed{}, fmt.Errorf("begin: %w", err)
	}
	c, err := q.read(br)
	if err == nil && also != nil {
		err = also.Read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = q.moves(ctx, conn, consumer, c)
	}
	if err != nil {
		u.Close(ctx)
		return nil, Claimed{}, err
	}
	return u, c, nil
}

// Query runs a query inside the transaction.
func (u *Unit) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.conn.Query(ctx, sql, args...)
}

// Exec runs a statement inside the transaction.
func (u *Unit) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return u.conn.Exec(ctx, sql, args...)
}

// QueryRow runs a query returning one row inside the transaction.
func (u *Unit) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return u.conn.QueryRow(ctx, sql, args...)
}

// SendBatch sends b's statements inside the transaction, in one round
// trip.
func (u *Unit) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return u.conn.SendBatch(ctx, b)
}

// Commit sends b's statements and COMMIT in one round trip.
func (u *Unit) Commit(ctx context.Context, b *pgx.Batch) error {
	b.Queue(`COMMIT`)
	err := u.conn.SendBatch(ctx, b).Close()
	if err == nil {
		u.open = false
	}
	return err
}

// Close rolls back what was not committed and releases the connection. A
// connection whose state is unknown is closed, not reused: the pool drops
// connections released inside a transaction.
func (u *Unit) Close(ctx context.Context) {
	if u.open {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := u.conn.Exec(rctx, `ROLLBACK`); err != nil {
			_ = u.conn.Conn().Close(rctx)
		}
		u.open = false
	}
	u.conn.Release()
}

// PruneInbox deletes inbox rows older than retention, at most 10,000 per
// statement so a large backlog never holds long locks, and returns how many
// it deleted. An event older than retention that is delivered again (only a
// replay without reset does that) would then be applied again: keep
// retention above the stream's max age, or 0 (keep forever).
func PruneInbox(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, `
			DELETE FROM inbox WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM inbox WHERE processed_at < now() - make_interval(secs => $1) LIMIT 10000))`,
			retention.Seconds())
		if err != nil {
			return total, fmt.Errorf("prune inbox: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 10000 {
			return total, nil
		}
	}
}
