package bus

import (
	"net/url"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// uris keeps the parsed form of the source and dataschema values decoding
// meets: a publisher sends the same few on every event, and the SDK's
// setters parse each one again (url.Parse was a tenth of decoding's CPU).
// Bounded, since a hostile stream can send a new value every time.
var uris = uriCache{m: make(map[string]url.URL)}

const uriCacheSize = 1024

type uriCache struct {
	mu sync.Mutex
	m  map[string]url.URL
}

// parse returns u parsed as the SDK's setters parse it, or false when it
// does not parse or would be trimmed first: the setter then handles it,
// error path included.
func (c *uriCache) parse(u string) (url.URL, bool) {
	if u == "" || strings.TrimSpace(u) != u {
		return url.URL{}, false
	}
	c.mu.Lock()
	p, ok := c.m[u]
	c.mu.Unlock()
	if ok {
		return p, true
	}
	pu, err := url.Parse(u)
	if err != nil {
		return url.URL{}, false
	}
	c.mu.Lock()
	if len(c.m) >= uriCacheSize {
		clear(c.m)
	}
	c.m[u] = *pu
	c.mu.Unlock()
	return *pu, true
}

// setSource is ev.SetSource(v), sparing the parse of a value seen before.
func setSource(ev *event.Event, v string) {
	if ec, ok := ev.Context.(*event.EventContextV1); ok {
		if u, ok := uris.parse(v); ok {
			ec.Source = types.URIRef{URL: u}
			return
		}
	}
	ev.SetSource(v)
}

// setDataSchema is ev.SetDataSchema(v), sparing the parse of a value seen
// before.
func setDataSchema(ev *event.Event, v string) {
	if ec, ok := ev.Context.(*event.EventContextV1); ok {
		if u, ok := uris.parse(v); ok {
			ec.DataSchema = &types.URI{URL: u}
			return
		}
	}
	ev.SetDataSchema(v)
}
