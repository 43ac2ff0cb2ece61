package search_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// defineChain is 40 templates each calling the one below twice: 2^40
// calls from about 2 KB.
func defineChain() string {
	var b strings.Builder
	b.WriteString(`{{define "t0"}}{{end}}`)
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, `{{define "t%d"}}{{template "t%d"}}{{template "t%d"}}{{end}}`, i, i-1, i-1)
	}
	b.WriteString(`{{template "t40"}}`)
	return b.String()
}

// hostile are the templates; stored before creation refused them,
// they must still render within the limits.
var hostile = map[string]string{
	"nested-ranges": `Hi{{range 1000000}}{{range 1000000}}{{end}}{{end}}`,
	"printf-width":  `{{range 100}}{{printf "%999999d" 1}}{{end}}`,
	"define-chain":  defineChain(),
}

// Many concurrent prompts.get of hostile prompts on one copy do not keep
// another tenant's prompts.get from being answered: each hostile render
// stops at its limit and is answered render_limit, and the victim's
// request, queued behind them for a slot, is answered with its rendering.
//
// Unlimited, the hostile renderings would hold every slot for hours
// (2^40 template calls, 10^12 loop iterations), and the victim would be
// answered timeout. The service's timeout is set far above what limited
// renderings take, even on a loaded machine, so a rendering in the
// victim's reply, not a time measured here, is what shows the slots were
// handed back.
func TestHostileRendersDoNotStarveOtherTenants(t *testing.T) {
	n := testenv.StartNATS(t)
	const timeout = 30 * time.Second
	f := newFixture(t, lexical, search.Options{GetCacheSize: -1})
	attacker, victim, w := testenv.Tenant(t), testenv.Tenant(t), word(t)
	for name, content := range hostile {
		f.prompt(promptSpec{tenant: attacker, id: name + "-" + w, content: content})
	}
	f.prompt(promptSpec{tenant: victim, id: "greet-" + w, content: "Hello {{.name}}",
		params: []library.Param{{Name: "name", Type: "string", Required: true}}})

	reg, err := schemas.Load()
	require.NoError(t, err)
	svc, err := service.New(n.NC, service.Options{Name: "render-" + w, Timeout: timeout, Validator: reg, Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, f.s.Register(svc))
	client, err := nats.Connect(n.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)

	get := func(tenant string, req search.GetRequest) (search.GetResponse, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second) // the service answers first
		defer cancel()
		start := time.Now()
		var r search.GetResponse
		err := service.Call(ctx, client, search.GetSubject+"."+tenant, req, &r)
		return r, time.Since(start), err
	}
	// The hostile requests are published first on one connection, so the
	// service takes them off its subscription before the victim's.
	inbox := client.NewRespInbox()
	replies, err := client.SubscribeSync(inbox + ".*")
	require.NoError(t, err)
	const each = 8 // 24 hostile requests at once, more than the 16 slots
	type request struct {
		name   string
		params map[string]any
	}
	var sent []request
	for i := range each {
		for name := range hostile {
			params := map[string]any{}
			if i%2 == 0 {
				params = nil // prompts.get without params renders too
			}
			// Written out: GetRequest omits empty params.
			body := fmt.Sprintf(`{"id":%q}`, name+"-"+w)
			if params != nil {
				body = fmt.Sprintf(`{"id":%q,"params":{}}`, name+"-"+w)
			}
			require.NoError(t, client.PublishRequest(search.GetSubject+"."+attacker, fmt.Sprintf("%s.%d", inbox, len(sent)), []byte(body)))
			sent = append(sent, request{name, params})
		}
	}
	require.NoError(t, client.Flush())
	r, took, err := get(victim, search.GetRequest{ID: "greet-" + w, Params: map[string]any{"name": "Ada"}})
	require.NoError(t, err, "after %s", took)
	require.Equal(t, ptr("Hello Ada"), r.Rendered)
	t.Logf("the victim was answered after %s", took)

	codes := map[string]int{}
	for range sent {
		msg, err := replies.NextMsg(timeout + 10*time.Second) // each is answered by its timeout
		require.NoError(t, err, "every hostile request is answered; codes so far %v", codes)
		i := idx(t, msg.Subject)
		var body struct {
			search.GetResponse
			Error *service.Error `json:"error"`
		}
		require.NoError(t, json.Unmarshal(msg.Data, &body))
		switch {
		case body.Error != nil:
			codes[body.Error.Code]++
			require.Contains(t, []string{service.CodeRenderLimit, service.CodeOverloaded}, body.Error.Code, "%s: %v", sent[i].name, body.Error)
			if body.Error.Code == service.CodeRenderLimit {
				require.NotNil(t, sent[i].params, "without params, a rendering that fails is left out")
			}
		default:
			codes["ok"]++
			require.Nil(t, sent[i].params, "%s: %s", sent[i].name, msg.Data)
			require.Equal(t, sent[i].name+"-"+w, body.Prompt.ID)
			require.Nil(t, body.Rendered, "the prompt, without a rendering")
		}
	}
	require.Positive(t, codes[service.CodeRenderLimit], "%v", codes)
	t.Logf("replies: %v", codes)
}

func idx(t *testing.T, subject string) int {
	i, err := strconv.Atoi(subject[strings.LastIndexByte(subject, '.')+1:])
	require.NoError(t, err)
	return i
}

// A rendering within the render limits whose reply is over the NATS max
// payload (encoding/json writes < as \u003c) is answered too_large, not
// left to the client's timeout. The server has NATS's default 1 MB max
// payload.
func TestOversizedRenderingIsAnswered(t *testing.T) {
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: t.TempDir(), MaxPayload: 1 << 20, Log: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f := newFixture(t, lexical, search.Options{})
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "big-" + w, content: "{{range 1000}}" + strings.Repeat("<", 250) + "{{end}}"})
	svc, err := service.New(nc, service.Options{Name: "big-" + w, Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, f.s.Register(svc))
	client, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(client.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = service.Call(ctx, client, search.GetSubject+"."+ten, search.GetRequest{ID: "big-" + w}, nil)
	var se *service.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, service.CodeTooLarge, se.Code)
}
