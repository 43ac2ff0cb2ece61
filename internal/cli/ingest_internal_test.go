package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dev token survives restarts (clients keep working), the --data
// directory's first; one that cannot be saved still serves.
func TestDevTokenReused(t *testing.T) {
	cache, data := t.TempDir(), t.TempDir()
	e := Env{Getenv: func(k string) string {
		if k == "XDG_CACHE_HOME" {
			return cache
		}
		return ""
	}}
	tok, path, err := devToken(e, "")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(cache, "agentq", devTokenFile), path)
	again, _, err := devToken(e, "")
	require.NoError(t, err)
	require.Equal(t, tok, again)

	// A --data directory with a token of its own: that one, saved for
	// clients at the default place too.
	require.NoError(t, os.WriteFile(filepath.Join(data, devTokenFile), []byte("aq_fromthedatadirectory\n"), 0o600))
	got, path, err := devToken(e, data)
	require.NoError(t, err)
	require.Equal(t, "aq_fromthedatadirectory", got)
	require.Equal(t, filepath.Join(cache, "agentq", devTokenFile), path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "aq_fromthedatadirectory\n", string(raw))

	// Nowhere to save it: a new token all the same, and why.
	blocked := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(blocked, "agentq"), nil, 0o644))
	e.Getenv = func(k string) string {
		if k == "XDG_CACHE_HOME" {
			return blocked
		}
		return ""
	}
	tok, path, err = devToken(e, "")
	require.Error(t, err)
	require.Empty(t, path)
	require.Len(t, tok, len("aq_")+22)
}
