package bus

import (
	"fmt"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"
)

// The cached setters leave an event exactly as the SDK's setters do, the
// first time a value is seen and every time after, errors included.
func TestURICacheSetsWhatTheSDKSets(t *testing.T) {
	values := []string{
		"agent://checkout", "https://example.com/schemas/tool.executed.v1.json", "/relative/ref",
		"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", "mailto:a@example.com", "https://user:pw@h/p?q=1#f",
		"%zz", "http://a b", " padded ", "\tx", "", ":", "http://[::1", "a%20b",
	}
	for _, v := range values {
		for pass := range 2 {
			t.Run(fmt.Sprintf("%q/%d", v, pass), func(t *testing.T) {
				want, got := event.New(specVersion), event.New(specVersion)
				want.SetSource(v)
				want.SetDataSchema(v)
				setSource(&got, v)
				setDataSchema(&got, v)
				require.Equal(t, want.Source(), got.Source())
				require.Equal(t, want.DataSchema(), got.DataSchema())
				require.Equal(t, want.Context, got.Context)
				werr, gerr := want.Validate(), got.Validate()
				require.Equal(t, werr == nil, gerr == nil)
				if werr != nil {
					require.Equal(t, sdkError(werr), sdkError(gerr)) // fields sorted
				}
			})
		}
	}
}

// A stream of distinct values never grows the cache past its bound.
func TestURICacheIsBounded(t *testing.T) {
	for i := range 3 * uriCacheSize {
		_, ok := uris.parse(fmt.Sprintf("agent://a/%d", i))
		require.True(t, ok)
	}
	uris.mu.Lock()
	defer uris.mu.Unlock()
	require.LessOrEqual(t, len(uris.m), uriCacheSize)
}
