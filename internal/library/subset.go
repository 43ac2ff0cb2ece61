package library

import (
	"fmt"
	"strconv"
	"text/template/parse"
)

// The template subset prompts may use. A prompt is rendered on every
// prompts.get, for any tenant's request, so CheckTemplate refuses at
// creation what would make one rendering's cost unbounded or independent
// of its parameters; what depends on the values given is bounded when
// rendering (Limits).
const (
	// MaxRangeCount is the largest integer a {{range N}} may count to.
	MaxRangeCount = 1000
	// MaxFormatWidth is the largest width or precision a printf verb may
	// have (fmt itself allows 1e6, a megabyte per verb).
	MaxFormatWidth = 256
)

// value is what the checker knows of a pipeline's value.
type value struct {
	// root: it may be the parameters themselves ($, or dot where dot is
	// $), so a field of it is a parameter.
	root bool
	// elem is the depth of the range whose element this value is, or
	// is part of; 0 when it is not part of any range's element.
	elem int
	// num: an integer the template computed (a literal, len, a range
	// index or an element of an integer range), never a parameter's
	// value (parameters are JSON numbers, which range does not take).
	num bool
	// n is its value when known (a literal); -1 when not.
	n int64
}

var plain = value{n: -1}

// merge is what a variable may hold after one assignment or the other.
func (v value) merge(w value) value {
	out := value{root: v.root || w.root, num: v.num || w.num, n: -1}
	if v.elem == w.elem {
		out.elem = v.elem
	}
	if v.num && w.num && v.n == w.n {
		out.n = v.n
	}
	return out
}

// part is a value reached from v by a field, an index or a slice.
func (v value) part() value { return value{elem: v.elem, n: -1} }

// checker walks a template's tree for CheckTemplate and UsedParams: the
// parameters it uses, and the first construct outside the subset.
type checker struct {
	used  map[string]bool
	vars  []map[string]value // innermost scope last
	depth int                // ranges the walk is inside (bodies, not else)
	err   error
}

func newChecker() *checker {
	return &checker{used: map[string]bool{}, vars: []map[string]value{{"$": {root: true, n: -1}}}}
}

func (c *checker) fail(n parse.Node, format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s (at %q)", ErrTemplate, fmt.Sprintf(format, args...), clip(n.String(), 60))
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (c *checker) push() { c.vars = append(c.vars, map[string]value{}) }
func (c *checker) pop()  { c.vars = c.vars[:len(c.vars)-1] }

func (c *checker) lookup(name string) (value, int) {
	for i := len(c.vars) - 1; i >= 0; i-- {
		if v, ok := c.vars[i][name]; ok {
			return v, i
		}
	}
	return plain, -1 // undefined: parse already refused it
}

// declare binds a pipeline's variables: := declares in the innermost
// scope, = changes the variable where it was declared (to what it may now
// hold, either value).
func (c *checker) declare(p *parse.PipeNode, v value) {
	for _, d := range p.Decl {
		name := d.Ident[0]
		if p.IsAssign {
			if old, i := c.lookup(name); i >= 0 {
				c.vars[i][name] = old.merge(v)
			}
			continue
		}
		c.vars[len(c.vars)-1][name] = v
	}
}

// list walks a list of nodes with dot.
func (c *checker) list(l *parse.ListNode, dot value) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		c.node(n, dot)
	}
}

func (c *checker) node(n parse.Node, dot value) {
	switch n := n.(type) {
	case *parse.ActionNode:
		c.declare(n.Pipe, c.pipe(n.Pipe, dot))
	case *parse.IfNode:
		c.push()
		c.declare(n.Pipe, c.pipe(n.Pipe, dot))
		c.scoped(n.List, dot)
		c.scoped(n.ElseList, dot)
		c.pop()
	case *parse.WithNode:
		c.push()
		v := c.pipe(n.Pipe, dot)
		c.declare(n.Pipe, v)
		c.scoped(n.List, v)
		c.scoped(n.ElseList, dot)
		c.pop()
	case *parse.RangeNode:
		c.rangeNode(n, dot)
	case *parse.TemplateNode:
		c.fail(n, "{{template}}, {{define}} and {{block}} are not supported in prompts")
		c.pipe(n.Pipe, dot)
	}
}

func (c *checker) scoped(l *parse.ListNode, dot value) {
	c.push()
	c.list(l, dot)
	c.pop()
}

func (c *checker) rangeNode(n *parse.RangeNode, dot value) {
	c.push()
	defer c.pop()
	v := c.pipe(n.Pipe, dot)
	switch {
	case v.num && (v.n < 0 || c.depth > 0):
		c.fail(n, "range over a computed integer or nested in another range; range over a parameter, or over a literal up to %d outside any range", MaxRangeCount)
	case v.num && v.n > MaxRangeCount:
		c.fail(n, "range over %d; at most %d", v.n, MaxRangeCount)
	case c.depth > 0 && v.elem != c.depth:
		// Nested loops over independent collections multiply: a few
		// kilobytes of parameters would make billions of iterations.
		c.fail(n, "a range inside a range must iterate over a part of the outer element ({{range .Items}}{{range .Tags}}); this one would multiply the iterations")
	}
	c.depth++
	elem := value{elem: c.depth, num: v.num, n: -1}
	index := value{num: true, n: -1}
	c.push()
	switch {
	case n.Pipe.IsAssign: // {{range $i, $e = ...}} assigns outer variables
		c.declare(n.Pipe, elem.merge(index))
	case len(n.Pipe.Decl) == 1:
		c.vars[len(c.vars)-1][n.Pipe.Decl[0].Ident[0]] = elem
	case len(n.Pipe.Decl) == 2:
		c.vars[len(c.vars)-1][n.Pipe.Decl[0].Ident[0]] = index
		c.vars[len(c.vars)-1][n.Pipe.Decl[1].Ident[0]] = elem
	}
	c.list(n.List, elem)
	c.pop()
	c.depth--
	c.scoped(n.ElseList, dot)
}

// pipe returns the value of a pipeline: its last command's.
func (c *checker) pipe(p *parse.PipeNode, dot value) value {
	if p == nil {
		return plain
	}
	v := plain
	for i, cmd := range p.Cmds {
		var piped *value
		if i > 0 {
			piped = &v
		}
		v = c.command(cmd, dot, piped)
	}
	return v
}

// command returns the value of one command; piped is the previous
// command's value in the pipeline, passed as its last argument.
func (c *checker) command(cmd *parse.CommandNode, dot value, piped *value) value {
	if len(cmd.Args) == 0 {
		return plain
	}
	id, ok := cmd.Args[0].(*parse.IdentifierNode)
	if !ok {
		return c.arg(cmd.Args[0], dot)
	}
	args := make([]value, 0, len(cmd.Args))
	for _, a := range cmd.Args[1:] {
		args = append(args, c.arg(a, dot))
	}
	if piped != nil {
		args = append(args, *piped)
	}
	switch id.Ident {
	case "len":
		return value{num: true, n: -1}
	case "index":
		// {{index . "Name"}} reads the parameter Name.
		if len(cmd.Args) >= 3 && len(args) > 0 && args[0].root {
			if s, ok := cmd.Args[2].(*parse.StringNode); ok {
				c.used[s.Text] = true
			}
		}
		if len(args) > 0 {
			return args[0].part()
		}
	case "slice":
		if len(args) > 0 {
			return args[0].part()
		}
	case "and", "or":
		// The value of one of the arguments.
		out := value{n: -1}
		for i, a := range args {
			if i == 0 {
				out = a
				continue
			}
			out = out.merge(a)
		}
		return out
	case "printf":
		if len(cmd.Args) >= 2 {
			if s, ok := cmd.Args[1].(*parse.StringNode); ok {
				if _, err := checkFormat(s.Text); err != nil {
					c.fail(cmd, "%v", err)
				}
			}
		}
	}
	return plain
}

// arg returns the value of one operand.
func (c *checker) arg(n parse.Node, dot value) value {
	switch n := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.FieldNode:
		if dot.root {
			c.used[n.Ident[0]] = true
		}
		return dot.part()
	case *parse.VariableNode:
		v, _ := c.lookup(n.Ident[0])
		if len(n.Ident) == 1 {
			return v
		}
		if v.root {
			c.used[n.Ident[1]] = true
		}
		return v.part()
	case *parse.ChainNode:
		v := c.arg(n.Node, dot)
		if len(n.Field) == 0 {
			return v
		}
		if v.root {
			c.used[n.Field[0]] = true
		}
		return v.part()
	case *parse.PipeNode:
		c.push() // variables declared in a parenthesised pipeline stay in it
		defer c.pop()
		v := c.pipe(n, dot)
		c.declare(n, v)
		return v
	case *parse.NumberNode:
		if n.IsInt {
			return value{num: true, n: max(n.Int64, 0)}
		}
	case *parse.IdentifierNode:
		return c.command(&parse.CommandNode{Args: []parse.Node{n}}, dot, nil)
	}
	return plain
}

// checkFormat refuses a printf format whose verbs may pad one value to
// more than MaxFormatWidth bytes, or take their width from an argument
// (*). It returns the largest width or precision in f.
func checkFormat(f string) (widest int, err error) {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		for i < len(f) && (f[i] == '+' || f[i] == '-' || f[i] == '#' || f[i] == ' ' || f[i] == '0') {
			i++
		}
		for part := 0; part < 2 && i < len(f); part++ {
			if part == 1 {
				if f[i] != '.' {
					break
				}
				i++
			}
			if i < len(f) && f[i] == '[' { // explicit argument index
				for i < len(f) && f[i] != ']' {
					i++
				}
				i++
			}
			if i < len(f) && f[i] == '*' {
				return 0, fmt.Errorf("printf format %q takes a width or precision from an argument (*); write it in the format, at most %d", clip(f, 40), MaxFormatWidth)
			}
			j := i
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				i++
			}
			if j < i {
				n, err := strconv.Atoi(f[j:i])
				if err != nil || n > MaxFormatWidth {
					return 0, fmt.Errorf("printf format %q has a width or precision of %s; at most %d", clip(f, 40), f[j:i], MaxFormatWidth)
				}
				widest = max(widest, n)
			}
		}
		// i is at the verb (or an explicit index before it); the loop's
		// i++ steps over it.
	}
	return widest, nil
}
