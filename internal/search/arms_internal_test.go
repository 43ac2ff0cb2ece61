package search

import "testing"

// TestApartSlots: at most ArmsApart searches, and a quarter of the pool,
// run apart at a time; none with a pool of one connection or a negative
// ArmsApart.
func TestApartSlots(t *testing.T) {
	for _, c := range []struct {
		n     int
		conns int32
		want  int // -1: nil
	}{
		{1, 4, 1}, {4, 4, 1}, {4, 16, 4}, {8, 16, 4}, {2, 40, 2},
		{1, 2, 1}, {1, 1, -1}, {-1, 16, -1}, {0, 16, -1},
	} {
		got := apartSlots(c.n, c.conns)
		if c.want < 0 {
			if got != nil {
				t.Errorf("apartSlots(%d, %d) = %d slots, want none", c.n, c.conns, cap(got))
			}
			continue
		}
		if got == nil || cap(got) != c.want {
			t.Errorf("apartSlots(%d, %d) = %v, want %d slots", c.n, c.conns, got, c.want)
		}
	}
}
