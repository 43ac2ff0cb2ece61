package client

// MissPushes stops c hearing prompt changes, as if every push were lost,
// so a test can see what else keeps the cache fresh.
func (c *Client) MissPushes() {
	for _, s := range c.prompts.subs {
		_ = s.Unsubscribe()
	}
}
