// Package migrations holds agentq's numbered SQL migrations, embedded so every
// binary can apply them. Each file is a goose migration and is idempotent
// (IF NOT EXISTS everywhere): N copies starting together are serialised by an
// advisory lock, and a database that shares one backend across connections
// (PGlite) may still see a migration applied twice.
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
