package search

import (
	"container/list"
	"sync"
)

// cache keeps the most recently used query embeddings: agents repeat
// their queries, and a provider round trip costs tens to hundreds of
// milliseconds. Keys carry the model, so a model change never reuses a
// vector. Vectors are shared and must not be modified.
type cache struct {
	mu    sync.Mutex
	size  int
	order *list.List // front = most recent; values are *entry
	items map[string]*list.Element
}

type entry struct {
	key string
	vec []float32
}

func newCache(size int) *cache {
	if size <= 0 {
		return nil
	}
	return &cache{size: size, order: list.New(), items: make(map[string]*list.Element, size)}
}

func cacheKey(model, text string) string { return model + "\x00" + text }

func (c *cache) get(key string) ([]float32, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry).vec, true
}

func (c *cache) put(key string, vec []float32) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*entry).vec = vec
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&entry{key, vec})
	if c.order.Len() > c.size {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*entry).key)
	}
}
