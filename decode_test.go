package agentq_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Event data is read with bus.DecodeData, by exact names, everywhere:
// encoding/json takes names regardless of letter case, so a field the
// schema never checked ("TOOL_NAME") would be read in place of the one it
// did. This keeps a new reader of the stream from slipping back.
func TestEventDataIsReadByExactNames(t *testing.T) {
	unmarshalData := regexp.MustCompile(`json\.Unmarshal\([A-Za-z_.]*\.Data\(\)`)
	var found []string
	for _, root := range []string{"internal", "client", "cmd"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				if unmarshalData.MatchString(line) {
					found = append(found, p+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Empty(t, found, "decode event data with bus.DecodeData")
}
