package chat_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// golden compares got with testdata/name.golden, or rewrites the file when
// the test runs with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/chat/ -run %s -update to create it", t.Name())
	require.Equal(t, string(want), got, "output differs from %s; run with -update if the change is intended", path)
}

// transcript renders messages the way golden files show them.
func transcript(msgs []chat.Message) string {
	return chat.New("").Append(msgs...).Text() + "\n"
}
