package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeSection returns the README's section under heading, to the next
// heading of the same level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "\n"+heading+"\n")
	require.NotEqual(t, -1, start, "README has %q", heading)
	rest := text[start+len(heading)+2:]
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// The README's first paragraph lists what the two commands need: the Go
// of go.mod, Node and npm, and the C compiler the race detector needs;
// and the nats CLI its examples use.
func TestReadmePrerequisites(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	intro, _, _ := strings.Cut(string(raw), "\n## ")
	intro = strings.Join(strings.Fields(intro), " ")
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	require.NotNil(t, goVersion)
	for _, want := range []string{"Go " + string(goVersion[1]), "Node 20", "npm", "C compiler", "-race", "`nats`", "natscli"} {
		require.Contains(t, intro, want)
	}
}

// The commands of "Try it" work when pasted: they use the binary make dev
// built (go run relinks at every call), no command is broken inside a
// quoted string or an inline code span, every agentq command exists, and
// nats commands name the server.
func TestReadmeTryItCommands(t *testing.T) {
	section := readmeSection(t, "## Try it")
	require.NotContains(t, section, "go run ./cmd/agentq")

	// Inline code spans: one line each, so a copied command is whole.
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(section, "")
	for _, span := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(prose, -1) {
		require.NotContains(t, span[1], "\n", "an inline command broken across lines: %q", span[1])
	}

	// Code blocks: continued lines joined, quotes closed on each line.
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		joined := strings.ReplaceAll(block[1], "\\\n", " ")
		for _, line := range strings.Split(joined, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
	}
	for _, span := range regexp.MustCompile("`((?:bin/agentq|nats|make) [^`]*)`").FindAllStringSubmatch(prose, -1) {
		cmds = append(cmds, span[1])
	}
	require.NotEmpty(t, cmds)
	for _, cmd := range cmds {
		words, ok := shellWords(cmd)
		require.True(t, ok, "quotes left open: %q", cmd)
		switch words[0] {
		case "bin/agentq":
			require.Contains(t, commands, words[1], "agentq has no command %q: %s", words[1], cmd)
		case "nats":
			require.Contains(t, words, "-s", "nats names the server (agentq dev's may not be on the default port): %s", cmd)
		case "make", "psql", "curl":
		default:
			t.Errorf("a command the README does not explain: %s", cmd)
		}
	}
}

// shellWords splits a command as sh does for quotes (no expansions), up to
// a comment; ok is false when a quote is left open.
func shellWords(line string) (words []string, ok bool) {
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in:
			return words, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, quote == 0
}
