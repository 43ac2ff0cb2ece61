package providertest_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/provider/providertest"
)

// TestContextResponder: the responder sees the request's context, done
// when the client gives up, and takes precedence over SetResponder.
func TestContextResponder(t *testing.T) {
	srv := providertest.New(t)
	srv.SetResponder(providertest.Fixed("plain"))
	gone := make(chan error, 1)
	srv.SetContextResponder(func(ctx context.Context, req providertest.ChatRequest) string {
		if req.UserText() == "hello there\n" {
			return "with context"
		}
		<-ctx.Done()
		gone <- ctx.Err()
		return ""
	})
	status, _, got := post(t, srv, "/chat/completions", chatBody)
	require.Equal(t, 200, status)
	require.Equal(t, "with context", got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"])

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	body := `{"model":"m","messages":[{"role":"user","content":"wait"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/chat/completions", bytes.NewBufferString(body))
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	select {
	case err := <-gone:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the responder's context was never done")
	}
	srv.SetContextResponder(nil)
	_, _, got = post(t, srv, "/chat/completions", chatBody)
	require.Equal(t, "plain", got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"])
}
