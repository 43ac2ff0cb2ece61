package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/agentq/agentq/internal/library"
)

// --- the generated corpus ---

// benchFunctionWords head the vocabulary: in English text they are the
// most frequent words, and full-text search and the lexical embedder drop
// them.
var benchFunctionWords = strings.Fields(`the of and to a in is for that with on as be it this by or
from at an are your you if not each when then into`)

var benchParams = []library.Param{
	{Name: "Topic", Type: "string", Required: true, Description: "What the answer is about."},
	{Name: "Audience", Type: "string", Default: "engineers", Description: "Who reads the answer."},
	{Name: "MaxWords", Type: "integer", Default: float64(150), Description: "Longest answer in words."},
	{Name: "Language", Type: "string", Default: "English", Description: "Language of the answer."},
	{Name: "Input", Type: "string", Required: true, Description: "The text to work on."},
	{Name: "Formal", Type: "boolean", Default: false, Description: "Whether to answer formally."},
}

type benchID struct {
	id, name, typ, description string
	tags                       []string
	params                     []library.Param
	values                     map[string]any
	tokens                     []string // while generating: the latest version's content, words and {{.Param}} markers
	text                       string   // then: that content and the description, what queries quote
}

type benchPromptEv struct {
	id      int // index in ids
	content string
}

type benchToolEv struct {
	name, description, server string
	tags                      []string
	schema                    map[string]any
}

type benchCorpus struct {
	words   []string // by rank: function words first
	fn      int      // how many function words
	zipf    *rand.Zipf
	r       *rand.Rand
	ids     []benchID
	prompts []benchPromptEv // publish order
	tools   []benchToolEv
}

func newBenchCorpus(o IndexerOptions) *benchCorpus {
	c := &benchCorpus{words: append(slices.Clone(benchFunctionWords), strings.Fields(benchVocabulary)...), fn: len(benchFunctionWords)}
	c.r = rand.New(rand.NewPCG(o.Seed, 1))
	c.zipf = rand.NewZipf(c.r, 1.07, 2, uint64(len(c.words)-1))
	tags := c.words[c.fn : c.fn+60]
	for i := range o.PromptIDs {
		id := benchID{
			id: fmt.Sprintf("%s-%s-%d", c.content(), c.content(), i), typ: library.Types[c.r.IntN(len(library.Types))],
			values: map[string]any{},
		}
		id.name = strings.Join([]string{c.content(), c.content(), c.content()}, " ")
		id.description = c.sentence(8, 16)
		for range 1 + c.r.IntN(3) {
			if t := tags[c.r.IntN(len(tags))]; !slices.Contains(id.tags, t) {
				id.tags = append(id.tags, t)
			}
		}
		for _, j := range c.r.Perm(len(benchParams))[:1+c.r.IntN(3)] {
			p := benchParams[j]
			id.params = append(id.params, p)
			switch p.Type {
			case "integer":
				id.values[p.Name] = 80 + c.r.IntN(200)
			case "boolean":
				id.values[p.Name] = c.r.IntN(2) == 0
			default:
				id.values[p.Name] = c.sentence(2, 5)
			}
		}
		id.tokens = c.promptTokens(100+c.r.IntN(51), id.params)
		c.ids = append(c.ids, id)
	}
	for i := range o.Prompts {
		j := i % o.PromptIDs
		if i >= o.PromptIDs {
			c.ids[j].tokens = c.edit(c.ids[j].tokens)
		}
		c.prompts = append(c.prompts, benchPromptEv{id: j, content: strings.Join(c.ids[j].tokens, " ")})
	}
	// One string per id from here: 20,000 slices of ~130 words would be
	// millions of pointers for the garbage collector of the process that
	// also runs the indexer being measured.
	for j := range c.ids {
		c.ids[j].text = strings.Join(c.ids[j].tokens, " ") + " " + c.ids[j].description
		c.ids[j].tokens = nil
	}
	servers := make([]string, 50)
	for i := range servers {
		servers[i] = "mcp-" + c.content()
	}
	for i := range o.Tools {
		t := benchToolEv{
			name:        fmt.Sprintf("%s_%s_%d", c.content(), c.content(), i),
			description: c.sentence(10, 25),
			server:      servers[c.r.IntN(len(servers))],
			tags:        []string{tags[c.r.IntN(len(tags))]},
			schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		}
		props := t.schema["properties"].(map[string]any)
		for range 1 + c.r.IntN(3) {
			props[c.content()] = map[string]any{"type": "string", "description": c.sentence(3, 8)}
		}
		c.tools = append(c.tools, t)
	}
	return c
}

// word draws a word by rank, function words included.
func (c *benchCorpus) word() string { return c.words[c.zipf.Uint64()] }

// content draws a word that is not a function word.
func (c *benchCorpus) content() string {
	for {
		if i := int(c.zipf.Uint64()); i >= c.fn {
			return c.words[i]
		}
	}
}

func (c *benchCorpus) sentence(lo, hi int) string {
	n := lo + c.r.IntN(hi-lo+1)
	w := make([]string, n)
	for i := range w {
		w[i] = c.word()
	}
	w[0] = strings.ToUpper(w[0][:1]) + w[0][1:]
	return strings.Join(w, " ") + "."
}

// promptTokens is a prompt of about n words in sentences, with a
// {{.Name}} sentence for each parameter.
func (c *benchCorpus) promptTokens(n int, params []library.Param) []string {
	var out []string
	for len(out) < n {
		out = append(out, strings.Fields(c.sentence(8, 20))...)
	}
	for _, p := range params {
		at := c.r.IntN(len(out))
		out = slices.Insert(out, at, p.Name+":", "{{."+p.Name+"}}.")
	}
	return out
}

// edit is the next version: about one word in ten replaced.
func (c *benchCorpus) edit(tokens []string) []string {
	out := slices.Clone(tokens)
	for range max(1, len(out)/10) {
		i := c.r.IntN(len(out))
		if strings.Contains(out[i], "{{") || strings.HasSuffix(out[i], ":") {
			continue
		}
		w := c.word()
		if strings.HasSuffix(out[i], ".") {
			w += "."
		}
		out[i] = w
	}
	return out
}

// dropContents forgets the prompts' contents, needed only to publish and
// index them, before search is measured: the less the bench holds, the
// less its garbage collector takes from the indexer sharing its process.
func (c *benchCorpus) dropContents() {
	c.prompts = nil
}

func (c *benchCorpus) meanWords() float64 {
	total := 0
	for _, p := range c.prompts {
		total += len(strings.Fields(p.content))
	}
	return float64(total) / float64(max(1, len(c.prompts)))
}

func (c *benchCorpus) promptData(i int) map[string]any {
	p := c.prompts[i]
	id := c.ids[p.id]
	return map[string]any{
		"id": id.id, "type": id.typ, "name": id.name, "description": id.description, "content": p.content,
		"parameters": id.params, "tags": id.tags, "author": "agentq-bench",
	}
}

func (c *benchCorpus) toolData(i int) map[string]any {
	t := c.tools[i]
	return map[string]any{"name": t.name, "description": t.description, "server": t.server, "tags": t.tags, "input_schema": t.schema}
}

// promptText and toolText are what the indexer embeds.
func (c *benchCorpus) promptText(i int) string {
	p := c.prompts[i]
	id := c.ids[p.id]
	return strings.Join([]string{id.name, id.description, strings.Join(id.tags, " "), p.content}, ". ")
}

func (c *benchCorpus) toolText(i int) string {
	t := c.tools[i]
	return strings.Join([]string{strings.ReplaceAll(t.name, "_", " "), t.description, strings.Join(t.tags, " ")}, ". ")
}

// promptQuery and toolQuery are search queries: four in ten a few words
// of the corpus, three in ten a quote of a text, three in ten a
// paraphrase-like rewrite of one (some words replaced, function words
// dropped, two words swapped).
func (c *benchCorpus) promptQuery(r *rand.Rand) string {
	id := c.ids[r.IntN(len(c.ids))]
	return c.query(r, id.text)
}

func (c *benchCorpus) toolQuery(r *rand.Rand) string {
	t := c.tools[r.IntN(len(c.tools))]
	return c.query(r, t.description)
}

func (c *benchCorpus) query(r *rand.Rand, text string) string {
	var words []string
	for _, w := range strings.Fields(text) {
		if w = strings.ToLower(strings.Trim(w, ".:")); w != "" && !strings.Contains(w, "{{") {
			words = append(words, w)
		}
	}
	pick := func() string {
		// The shared zipf draws from c.r; queries use r (their own
		// stream) over the same ranks, roughly Zipf by rejection.
		for {
			i := r.IntN(len(c.words))
			if i >= c.fn && r.Float64() < 1/(1+float64(i-c.fn)/20) {
				return c.words[i]
			}
		}
	}
	switch k := r.IntN(10); {
	case k < 4 || len(words) < 12:
		n := 2 + r.IntN(3)
		q := make([]string, n)
		for i := range q {
			q[i] = pick()
		}
		return strings.Join(q, " ")
	case k < 7:
		n := 4 + r.IntN(5)
		at := r.IntN(len(words) - n)
		return strings.Join(words[at:at+n], " ")
	default:
		n := 6 + r.IntN(5)
		at := r.IntN(len(words) - n)
		var q []string
		for _, w := range words[at : at+n] {
			if slices.Contains(benchFunctionWords, w) {
				continue
			}
			if r.IntN(3) == 0 {
				w = pick()
			}
			q = append(q, w)
		}
		if len(q) > 2 {
			i := r.IntN(len(q) - 1)
			q[i], q[i+1] = q[i+1], q[i]
		}
		if len(q) == 0 {
			q = append(q, pick())
		}
		return strings.Join(q, " ")
	}
}

// benchVocabulary is the words of internal/embed/testdata (agentq's
// retrieval evaluation sets) by how often they occur there, most first.
const benchVocabulary = `list line get two message write file use user sql day customer create words time summary question
number change below return pull every code article request read only items how first using sentence
most email does date data three such search never keep issue give explain example describe
complaint changes why table problem new total test team path notes must exactly diff columns body
add action unit under suggest run review resume reply release make invoice index given fixes draft
document dates cover check travel tone tests support show should short security schema requests
recipe price over output other open names made incident image hundred fields field calendar between
answer about users ticket send refund postmortem posting order next meeting main look letter
itinerary http function endpoint end database currency commit api writer within whole whether well
web version tutor translate steps small shell service same rather provided points point object
numbers needs leave include followed five find directory command classify cause ask applied went
weather transcript subject student start slow seventy set rows result priority postgresql plan
plain owner off note merge local language label injection github fragment follow files error days
could convert client cases call busy budget breaking audio amount zero where were weak values
transcribe timeline term tables supplier subtotal stock stays states speech source slack sentences
root rewrite restart resize report reminder rating rate put production prevent prefer polish
payment paragraphs optimise normal news more mistake mentions mention matters math many low long
logs link large just job item invent input ingredients ingredient impact guess group generator
forecast flights flight fix finish finding final fifty fail extraction evidence events event
estimated escalation escalate empty due directions dependency delete define cpu cost contains
confidence concrete common comment column close clear claim choose cannot candidate bug book
behaviour avoid authentication appear already agent after address act wrong whys waiting vegetarian
vat types twelve traversal transport top terminal tell technical supervisor summarize subscription
specific shared secrets say running response replacement remove range races public promises openapi
online offer ocr neutral mood metrics matching maps log leftovers leak late last instead inbox
imperative human history hint headline hard guide goroutines geocode fridge features extract euros
escalated errors edge driven disk dinner design damaged current curl covering concise checklist
chat characters cancel calculator business break blameless billing before base back arrived
application another analyze adding achievements writes wrapped works worker work without whose
while whichever warnings warm vulnerable vulnerabilities view very utc uses used urgent upgrade
updated unless unknown units unicode understood unchecked type turn try true tried traveller
tracking totals today title tip times tickets through threatens thank tense temporary tax talk
system supports summarise substituting subqueries submitted structured strong strings string
straight storage stopping step stay status statistics stating statement stated state starts staged
spill specification specialist sorts something solves snippet smallest slower slightly sleep skills
single since similar sign sights side shown shop share several servings server sequential separator
separate sensational senior sections secondary screen scope school schedule scans scanning
satisfied salt safety safe rule row role rewritten reviewing restriction restaurant restate
responsible respond respectful respect resolved requirements required repository reports reported
replace repeated repeat remediation relaxed referring reference refactors reduce recommend
recipient reasonable reason realistic real reader reaching reach ranges raised quoting quote
quieter questions quantity quantities qualify purpose prose propose promise professional process
presents predicate praise practice polite policy player planner placeholder pick person performance
people patient paths paste past password passed parameterised parameter pantry page packages
package own overview outcome otherwise options opinions opening ones oil often nut numbered null
nouns notice nothing normalise nobody nitpicks nested negative named morning modest moderate mock
mitigations missing mismatch misestimated misconception migration metric method messages merged
mentioned medium measurable meal mathematics matches match march manager loops longer limits limit
likelihood like length legal leaving least know keys keeping joins joining jargon itself issues iso
involved interview interpretation internal interfaces interested injury individuals indexed
improvements improvement improved imports important hour hope honestly highlight higher high helps
headings hazard hashes hardening happened handlers half groups grand gluten gives git garlic
functions friendly free four format formal foreign flour fits fit finds filter filler figures
fenced feature fast false failure factual facts fact extra exported exploitation exploit explicit
explains explaining exist executive execute exceeds examine exact evening estimating estimate
engineer during duration down double dot documented documentation distinguish dispute disabling
difficulty dietary developer details destination descriptive descriptions describing described
delivery defined default declared decisions decision decimal decided decide cryptography critical
counts correctness correcting cooking conversations contexts context contents containing contacted
contact consumed confident condition concatenation component complete compiling company committed
commitments colon colleague clich cites chosen choice checks checking changed catch case carefully
capture calls buy bumps bullet breaks breach both booked blocking block blank blame bill behind
beginner begin balance away authorization author auditor attribute attend attacker attack
assumption assert asks asking array appropriate appears apologise apart anything answered amounts
ambiguous alone allowed allow allergy alias against afternoon affected advance adopt adjectives
activities absence above able zone yesterday yaml worth wording width wide weekend week ways
warehouse wants walking voice usage url urgently upcoming unbiased txt tuesday transit trading
tonight tomorrow tokyo titles ticker temperature teach takes synthesize symbol sunny subdirectories
street story stdout stderr staff spoken someone solutions snippets smaller signed shopper ship
sender seat scanned save sandbox route room right results rest reserve repo recording recipients
recent receipt recap rates raining quarterly prs project produce processor printed press post
podcast planes plane places pixels ping picks photo permanently percent pattern passenger part
parse paris parcel paragraph overwriting overloaded outage orders old numeric now notification
night nginx multi much money mom missed minutes memory meetings market mailed mailbox mail madrid
machine longitude login location load lisbon lax latitude latest lat land jfk inside indexes
incoming improve idea hours hotel host holiday helpdesk help height handwritten handing hacker
grouped grep golang giving gist generate friday french folder filesystem fetch faster expression
experienced exit existing exchange everyone evaluate episode entries english election driving drive
download downing done dollars did desk deploy daemon currencies creating crash coordinates cook
control consulting config conditions compute com colleagues coded clearer city channel changelog
card caller branch bounce berlin backup available attendees arithmetic archive approved apply app
angry analytics aloud alice algebra airports airport airline aapl`
