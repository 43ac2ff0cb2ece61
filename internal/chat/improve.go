package chat

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// WeaknessCategory is a kind of weakness the feedback analysis may find in
// a prompt.
type WeaknessCategory struct {
	Name        string
	Description string
}

// CategoryOther is the category of a weakness no other category fits.
const CategoryOther = "other"

// WeaknessCategories returns the categories of prompt weakness the
// feedback analysis classifies into, in a fixed order. It returns a new
// slice each time.
func WeaknessCategories() []WeaknessCategory {
	return []WeaknessCategory{
		{"short_answer", "Responses are too short or shallow for what was asked."},
		{"missing_sources", "Responses make claims without naming or linking where they come from."},
		{"incorrect_info", "Responses state wrong, outdated or invented facts."},
		{"no_tool_usage", "The assistant answered from memory where a tool would have given it the facts."},
		{"missing_context", "Responses ignore context the user gave or needed: their situation, constraints, earlier turns."},
		{"off_topic", "Responses miss the question or drift to something else."},
		{"poor_formatting", "Responses are hard to read or use: wrong structure or format, a wall of text."},
		{CategoryOther, "Anything else; the description says what."},
	}
}

// FeedbackSample is one piece of negative feedback on a prompt.
type FeedbackSample struct {
	// Query is what the user asked; required.
	Query string
	// Response is what the prompt's model answered, if known.
	Response string
	// Comment is what the user said about it, if anything.
	Comment string
	// Verdict is how the user rated the response, e.g. "thumbs down" or
	// "rating 0.2".
	Verdict string
}

// FeedbackAnalysisInput is what the feedback analysis looks at.
type FeedbackAnalysisInput struct {
	// Prompt is the content of the prompt the feedback is about; required.
	Prompt string
	// Samples are the negative feedback; at least one.
	Samples []FeedbackSample
	// Custom is tier-3 text for this analysis.
	Custom string
}

// FeedbackAnalysisMessages returns the system and user messages asking a
// model which weaknesses of a prompt its negative feedback shows, each in
// one of WeaknessCategories, with the samples that show it. The model is
// asked to answer with the JSON object ParseWeaknesses reads:
//
//	{"weaknesses": [{"category": "short_answer", "description": "...", "samples": [1, 3]}]}
func (b *Builder) FeedbackAnalysisMessages(in FeedbackAnalysisInput) ([]Message, error) {
	if strings.TrimSpace(in.Prompt) == "" {
		return nil, fmt.Errorf("%w: feedback analysis has no prompt", ErrInvalid)
	}
	if err := checkSamples(in.Samples); err != nil {
		return nil, err
	}
	var sys strings.Builder
	b.compose(&sys, "Feedback Analysis Instructions", feedbackAnalysisInstructions, Instructions{Custom: in.Custom})
	writeUntrusted(&sys)
	sys.WriteString("\n\n## Categories\n\n")
	for _, c := range WeaknessCategories() {
		fmt.Fprintf(&sys, "- %s: %s\n", c.Name, c.Description)
	}
	sys.WriteString("\n## Answer Format\n\nAnswer with one JSON object and nothing else:\n\n")
	sys.WriteString(`{"weaknesses": [{"category": "short_answer", "description": "what goes wrong in the responses, in one or two sentences", "samples": [1, 3]}]}`)
	sys.WriteString("\n\nsamples are the numbers of the samples that show the weakness. Name each weakness once. An empty list means the samples show no weakness a prompt could fix.")

	var user strings.Builder
	user.WriteString("## Prompt\n\n")
	writeFence(&user, FencePrompt, in.Prompt)
	user.WriteString("\n\n## Negative Feedback\n\n")
	writeSamples(&user, in.Samples)
	user.WriteString("\n\n")
	user.WriteString(feedbackAnalysisTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}

func checkSamples(samples []FeedbackSample) error {
	if len(samples) == 0 {
		return fmt.Errorf("%w: no feedback samples", ErrInvalid)
	}
	for i, s := range samples {
		if strings.TrimSpace(s.Query) == "" {
			return fmt.Errorf("%w: feedback sample %d has no query", ErrInvalid, i+1)
		}
	}
	return nil
}

// writeSamples writes the numbered samples, each part fenced.
func writeSamples(s *strings.Builder, samples []FeedbackSample) {
	for i, smp := range samples {
		if i > 0 {
			s.WriteString("\n\n")
		}
		fmt.Fprintf(s, "### Sample %d", i+1)
		if v := inline(smp.Verdict); v != "" {
			fmt.Fprintf(s, " (%s)", v)
		}
		s.WriteString("\n\nQuery:\n")
		writeFence(s, FenceUserQuery, smp.Query)
		if strings.TrimSpace(smp.Response) != "" {
			s.WriteString("\n\nResponse:\n")
			writeFence(s, FenceModelResponse, smp.Response)
		}
		if strings.TrimSpace(smp.Comment) != "" {
			s.WriteString("\n\nComment:\n")
			writeFence(s, FenceFeedbackComment, smp.Comment)
		}
	}
}

// Weakness is one weakness the feedback analysis found.
type Weakness struct {
	// Category is one of WeaknessCategories' names.
	Category string `json:"category"`
	// Description says what goes wrong; it may be empty.
	Description string `json:"description"`
	// Samples are the indexes (from 0) of the samples that show it.
	Samples []int `json:"samples"`
}

// ParseWeaknesses reads the weaknesses in a model's reply to
// FeedbackAnalysisMessages about samples samples. It finds the JSON
// object even when wrapped in prose or a ```json fence; a category it does
// not know becomes CategoryOther, with the model's word kept in the
// description; sample numbers outside 1..samples and repeats are dropped,
// and the rest returned as indexes from 0. An empty list is an answer (no
// weakness found). Errors wrap ErrNoAnswer or ErrBadAnswer.
func ParseWeaknesses(text string, samples int) ([]Weakness, error) {
	obj, err := findObject(text, "weaknesses")
	if err != nil {
		return nil, fmt.Errorf("parse weaknesses: %w", err)
	}
	var raw []struct {
		Category    string          `json:"category"`
		Description string          `json:"description"`
		Samples     json.RawMessage `json:"samples"`
	}
	if err := json.Unmarshal(obj["weaknesses"], &raw); err != nil {
		return nil, fmt.Errorf("parse weaknesses: %w: weaknesses is %.80s, want a list of objects", ErrBadAnswer, obj["weaknesses"])
	}
	known := map[string]bool{}
	for _, c := range WeaknessCategories() {
		known[c.Name] = true
	}
	out := make([]Weakness, 0, len(raw))
	for i, r := range raw {
		w := Weakness{Category: strings.ToLower(strings.TrimSpace(r.Category)), Description: strings.TrimSpace(r.Description), Samples: []int{}}
		if w.Category == "" {
			return nil, fmt.Errorf("parse weaknesses: %w: weakness %d has no category", ErrBadAnswer, i+1)
		}
		if !known[w.Category] {
			w.Description = strings.TrimSpace(oneLine(r.Category) + ": " + w.Description)
			w.Category = CategoryOther
		}
		var nums []float64
		if len(r.Samples) > 0 && string(r.Samples) != "null" {
			if err := json.Unmarshal(r.Samples, &nums); err != nil {
				return nil, fmt.Errorf("parse weaknesses: %w: samples of weakness %d is %.80s, want a list of numbers", ErrBadAnswer, i+1, r.Samples)
			}
		}
		for _, n := range nums {
			k := int(n)
			if float64(k) != n || k < 1 || k > samples || slices.Contains(w.Samples, k-1) {
				continue
			}
			w.Samples = append(w.Samples, k-1)
		}
		slices.Sort(w.Samples)
		out = append(out, w)
	}
	return out, nil
}

// ImprovementStrategy is one way of improving a prompt. Candidates
// generated with different strategies differ in kind, not only in wording.
type ImprovementStrategy struct {
	Name         string
	Instructions string
}

// ImprovementStrategies returns the strategies CandidateMessages can be
// given, in a fixed order, the most conservative first. It returns a new
// slice each time.
func ImprovementStrategies() []ImprovementStrategy {
	return []ImprovementStrategy{
		{"targeted_fix", "Change as little as possible: fix exactly the weaknesses found, most frequent first, and keep everything else word for word."},
		{"explicit_requirements", "Add explicit requirements a good response must meet, one for each weakness, as a short checklist the assistant follows before answering."},
		{"answer_structure", "Specify what a good response looks like: its structure, its length for each kind of question, and its format."},
		{"grounding", "Require grounded answers: use the available tools to get facts, name the sources of claims, and say plainly what is unknown instead of guessing."},
		{"scope_and_context", "Sharpen the scope: what the assistant must answer, which context from the user it must take into account, and when it should ask instead of assuming."},
		{"worked_example", "Add one short example of an excellent exchange, invented for the purpose (never taken from the feedback), that shows the weaknesses avoided."},
		{"restructure", "Rewrite the prompt from scratch in clear sections: role, context, how to work, constraints, response format."},
		{"reasoning_steps", "Make the assistant work in steps: understand the question, plan, answer, then check the answer against the question before sending it."},
		{"concise_rewrite", "Make the prompt shorter and sharper: remove what the assistant does not need, state each rule once, put the most important first."},
		{"audience", "Write for the user: adapt the level of detail, the tone and the terms to who asks and what they will do with the answer."},
	}
}

// CandidateInput is what one candidate prompt is generated from.
type CandidateInput struct {
	// Prompt is the current content of the prompt; required.
	Prompt string
	// Weaknesses are what the feedback analysis found; their Samples index
	// Samples.
	Weaknesses []Weakness
	// Samples are the negative feedback; at least one.
	Samples []FeedbackSample
	// Strategy is how this candidate improves the prompt; required.
	Strategy ImprovementStrategy
	// Custom is tier-3 text for this generation.
	Custom string
}

// CandidateMessages returns the system and user messages asking a model
// for a new version of a prompt that follows one improvement strategy to
// fix the weaknesses negative feedback showed. The model is asked to
// answer with the JSON object ParseCandidate reads:
//
//	{"content": "the complete new prompt", "changelog": "what changed and why"}
func (b *Builder) CandidateMessages(in CandidateInput) ([]Message, error) {
	if strings.TrimSpace(in.Prompt) == "" {
		return nil, fmt.Errorf("%w: candidate input has no prompt", ErrInvalid)
	}
	if err := checkSamples(in.Samples); err != nil {
		return nil, err
	}
	name := inline(in.Strategy.Name)
	if name == "" || strings.TrimSpace(in.Strategy.Instructions) == "" {
		return nil, fmt.Errorf("%w: candidate input has no strategy", ErrInvalid)
	}
	var sys strings.Builder
	b.compose(&sys, "Prompt Improvement Instructions", candidateInstructions, Instructions{Custom: in.Custom})
	writeUntrusted(&sys)
	sys.WriteString("\n\n## Answer Format\n\nAnswer with one JSON object and nothing else:\n\n")
	sys.WriteString(`{"content": "the complete new prompt", "changelog": "one or two sentences: what changed and which weaknesses it addresses"}`)

	var user strings.Builder
	user.WriteString("## Prompt\n\n")
	writeFence(&user, FencePrompt, in.Prompt)
	user.WriteString("\n\n## Weaknesses\n\n")
	if len(in.Weaknesses) == 0 {
		user.WriteString("The analysis named none; work from the samples.\n")
	}
	for _, w := range in.Weaknesses {
		fmt.Fprintf(&user, "- %s", inline(w.Category))
		if len(w.Samples) > 0 {
			nums := make([]string, len(w.Samples))
			for i, s := range w.Samples {
				nums[i] = strconv.Itoa(s + 1)
			}
			fmt.Fprintf(&user, " (%d of %d samples: %s)", len(w.Samples), len(in.Samples), strings.Join(nums, ", "))
		}
		if d := inline(w.Description); d != "" {
			fmt.Fprintf(&user, ": %s", d)
		}
		user.WriteString("\n")
	}
	user.WriteString("\n## Negative Feedback\n\n")
	writeSamples(&user, in.Samples)
	fmt.Fprintf(&user, "\n\n## Your Strategy\n\n%s: %s\n\n", name, oneLine(in.Strategy.Instructions))
	user.WriteString(candidateTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}

// Candidate is a generated version of a prompt.
type Candidate struct {
	Content   string `json:"content"`
	Changelog string `json:"changelog"`
}

// ParseCandidate reads the new prompt in a model's reply to
// CandidateMessages. It finds the JSON object even when wrapped in prose or
// a ```json fence and requires a non-empty content; the changelog may be
// missing. Errors wrap ErrNoAnswer or ErrBadAnswer.
func ParseCandidate(text string) (Candidate, error) {
	obj, err := findObject(text, "content")
	if err != nil {
		return Candidate{}, fmt.Errorf("parse candidate: %w", err)
	}
	var c Candidate
	if err := json.Unmarshal(obj["content"], &c.Content); err != nil {
		return Candidate{}, fmt.Errorf("parse candidate: %w: content is %.80s, want a string", ErrBadAnswer, obj["content"])
	}
	if c.Content = strings.TrimSpace(c.Content); c.Content == "" {
		return Candidate{}, fmt.Errorf("parse candidate: %w: empty content", ErrBadAnswer)
	}
	if c.Changelog, err = stringField(obj, "changelog"); err != nil {
		return Candidate{}, fmt.Errorf("parse candidate: %w", err)
	}
	return c, nil
}
