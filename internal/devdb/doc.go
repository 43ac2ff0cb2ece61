// Package devdb runs the development and test Postgres: PGlite (Postgres 18
// compiled to WASM) with pgvector, served over the Postgres wire protocol on
// 127.0.0.1 by @electric-sql/pglite-socket in a node child process.
//
// Start launches it and returns once it accepts connections; URL gives a pgx
// connection string; Close stops it. The node packages come from the
// repository's package-lock.json ("npm ci" or "make deps"); Start finds
// node_modules by walking up from the working directory and from the
// executable, or takes Options.Dir or $AGENTQ_PGLITE_DIR. The launcher,
// pglite-server.mjs, is embedded in the Go binary.
//
// The child never outlives its parent: on Linux the kernel SIGKILLs it when
// the parent dies (Pdeathsig, held on a locked OS thread), and everywhere it
// shuts down when its stdin, a pipe from the parent, reaches EOF. Close (or
// SIGTERM) closes the database cleanly, which matters for a persistent
// DataDir.
//
// It is a development and test database. Measure performance on real
// Postgres.
//
// # What PGlite is and is not (measured with PGlite 0.5.14, pglite-socket 0.2.17, pgvector 0.8.7)
//
// The experiments are in research_test.go (go test -tags research). Times
// are on the 2-core development machine.
//
//  1. Startup: an in-memory database takes 1.7–2 s; the first start after
//     "npm ci" takes 4.5–8 s because it runs initdb and then caches the
//     pristine cluster in node_modules/.cache/agentq-devdb, which later
//     in-memory starts load. A new DataDir takes 4.5 s (initdb), an existing
//     one about 1 s. Close takes 50–200 ms.
//  2. One backend, one statement at a time: every connection shares one
//     Postgres backend (pg_backend_pid is the same) and pglite-socket runs
//     one protocol message at a time. Concurrent queries from 8 goroutines
//     over pgxpool work. An open transaction blocks every other connection,
//     including plain queries and even new connections' startup, until it
//     commits or rolls back; there is no deadlock and no error, only waiting
//     (so a test that leaves a transaction open hangs everything else, and a
//     ctx timeout on the waiter is the only way out).
//  3. Session state is global: SET search_path on one connection is seen by
//     every other connection and by connections opened later; temp tables
//     are shared; search_path given as a startup parameter is ignored.
//     Use SET LOCAL inside a transaction (transactions are serialised, so it
//     is private to the transaction) or schema-qualified names.
//  4. Advisory locks do not exclude: pg_try_advisory_lock succeeds on a
//     second connection while the first holds the lock, and
//     pg_advisory_lock returns at once (one backend, so locks are
//     reentrant). Transaction-level locks "exclude" only because the second
//     connection waits for the first transaction to end. Leader election
//     and goose's session locker give no mutual exclusion here.
//  5. pgvector works: CREATE EXTENSION IF NOT EXISTS vector, vector(3),
//     an HNSW index, <=> ordering, SET LOCAL hnsw.ef_search, and
//     pgvector-go's pgx RegisterTypes in pgxpool AfterConnect (after the
//     extension exists).
//  6. CREATE SCHEMA works. CREATE DATABASE succeeds but is useless: the
//     database name in the connection string is ignored and every
//     connection lands in "postgres".
//  7. A client cut mid-transaction (TCP closed, pool closed) is rolled back
//     and the next client works at once; a client cut mid-query leaves the
//     query to finish first. A client cut in the middle of an
//     extended-protocol batch (say a Parse that failed, before its Sync)
//     used to wedge the server for good, new connections included; the
//     launcher now sends a Sync for every departing connection, which fixes
//     that.
//     A query cannot be cancelled (PGlite has no backend to signal), but
//     the launcher closes a CancelRequest's connection, and a Terminated
//     one once its earlier messages are served and its transaction rolled
//     back, as Postgres does: pgx waits for both closes when it abandons a
//     busy connection, up to 15 s, which every stop of a consumer under
//     load used to cost.
//  8. Query exec modes: pgx's default cache_statement fails as soon as two
//     connections prepare the same SQL ("prepared statement ... already
//     exists", the backend is shared) and describe_exec returned wrong rows
//     (375 of 400), binding one connection's parameters to another's
//     unnamed statement. cache_describe passed but is not recommended. exec and simple_protocol gave no error in 8×30
//     concurrent queries with 300 kB parameters. URL selects exec.
//  9. Connections: pglite-socket accepts one connection by default and
//     resets the rest; the launcher allows MaxConnections (100), measured:
//     the 101st is reset. Keep every pool's MaxConns well below it.
//  10. Memory: the node process holds about 370 MB RSS idle and about
//     470–500 MB after a busy test. Several servers at once cost that much
//     each.
//
// # For tests
//
// Because of 2–4 a server is not a place for tests that run in parallel
// with t.Parallel and rely on search_path, advisory locks or overlapping
// transactions. Share one server per test package (start it in TestMain)
// and either run that package's database tests one after another, creating
// a schema per test and naming it in every statement, or start a Server per
// parallel test and accept about 2 s and 400 MB each.
package devdb
