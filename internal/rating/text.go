package rating

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/agentq/agentq/internal/chat"
)

// maxBytesPerToken bounds the bytes one token can stand for in practice;
// truncation searches no further into a text than limit times this.
const maxBytesPerToken = 32

// Truncate returns text cut to at most limit tokens by counter, at a rune
// boundary, followed by a note saying how much was left out, and whether
// it cut anything. The note is outside the limit.
func Truncate(text string, limit int, counter chat.TokenCounter) (string, bool) {
	total := counter.CountTokens(text)
	if total <= limit {
		return text, false
	}
	// Binary search for the longest prefix within limit, over rune
	// boundaries: counting is linear, so this costs a few dozen passes
	// over at most limit*maxBytesPerToken bytes.
	end := min(len(text), limit*maxBytesPerToken)
	cuts := make([]int, 0, end/2)
	for i := range text[:end] {
		cuts = append(cuts, i)
	}
	if end == len(text) || utf8.RuneStart(text[end]) {
		cuts = append(cuts, end)
	}
	n := sort.Search(len(cuts), func(k int) bool { return counter.CountTokens(text[:cuts[k]]) > limit })
	lo := 0
	if n > 0 {
		lo = cuts[n-1]
	}
	return text[:lo] + fmt.Sprintf("\n[... cut by agentq: %d of about %d tokens shown]", counter.CountTokens(text[:lo]), total), true
}

// Sampled reports whether the event id of tenant is in the sample of the
// given share (0..1). The choice is a hash of tenant and id, so every
// copy, every redelivery and every replay choose the same events.
func Sampled(tenant, eventID string, share float64) bool {
	switch {
	case share >= 1:
		return true
	case share <= 0:
		return false
	}
	h := sha256.Sum256([]byte(tenant + "\x00" + eventID))
	// The top 53 bits as a uniform number in [0, 1).
	u := float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53)
	return u < share
}

// Day is the UTC day of stream time t, the day whose token budget a
// rating is charged to: stream time, not the clock, so a backlog worked
// off after midnight, a redelivery and a replay charge the same day.
func Day(t time.Time) string {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Format(time.DateOnly)
}

// clamp01 keeps x within [0, 1]; NaN becomes 0.
func clamp01(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return math.Max(0, math.Min(1, x))
}
