package cli

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/provider/providertest"
)

func init() {
	register("testmodel", "serve a deterministic test model on OpenAI's API, to try the lab without a real model", runTestModel)
	describe("testmodel", "[--addr HOST:PORT] [--latency D]", `Serves OpenAI's chat-completions and embeddings API with a model whose
answers a reader can predict, until interrupted: the lab's trials are
answered with the question and the system message they came with ("Re:
<question>" then the prompt version; as {"type": "answer", "message": ...}
when the version mentions JSON), so an assertion that looks for a
version's words passes for that version only; of the tools a trial offers,
it calls those the version names; the LLM judge gives 80 % of
every criterion's points; ratings are 0.5; the summary is a fixed
paragraph. Every answer comes after --latency.

Point agentq at it with AGENTQ_LLM_BASE_URL=<the URL it prints> and any
AGENTQ_LLM_MODEL. It is the server agentq's own tests use
(internal/provider/providertest), speaking the real protocol.`)
}

func runTestModel(ctx context.Context, e Env, _ config.Config, _ zerolog.Logger, args []string) error {
	const name = "testmodel"
	fs := flags(name, e)
	addr := fs.String("addr", "127.0.0.1:8090", "address to listen on")
	latency := fs.Duration("latency", 0, "delay before every answer, as a real model takes time")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageError(e, fs, name, "no arguments, got %d", len(pos))
	case *latency < 0:
		return usageError(e, fs, name, "--latency must not be negative")
	}
	srv, err := providertest.Listen(*addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.SetResponder(providertest.TestModel)
	srv.SetToolCaller(providertest.TestModelTools)
	srv.SetLatency(*latency)
	fmt.Fprintf(e.Stdout, "test model serving at %s (latency %s); stop with Ctrl-C\nuse it: AGENTQ_LLM_BASE_URL=%s AGENTQ_LLM_MODEL=test make dev\n",
		srv.URL, *latency, srv.URL)
	<-ctx.Done()
	fmt.Fprintf(e.Stdout, "test model stopped after %d requests\n", srv.Requests())
	return nil
}
