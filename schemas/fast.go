package schemas

// The fast path. Validating with the jsonschema library costs a decode
// into map[string]any, a big.Rat per number compared and an error tree,
// about 10-35 µs per event: the largest CPU cost of a consumer. The fast
// path reads the same compiled schemas (the library's *jsonschema.Schema,
// built from the same files) and checks the raw bytes in one pass, without
// decoding into Go values.
//
// It only ever accepts: an event it accepts is valid, and Validate returns
// nil at once. Everything else (an invalid event, or anything the fast
// path does not decide exactly: duplicate keys, exponents, a keyword it
// does not implement) goes to the library, which gives the verdict and the
// error message exactly as before. Each check is three-valued (pass, fail,
// unknown) so that not, if and anyOf stay exact. fast_test.go holds the
// differential tests against the library.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// verdict is the fast path's three-valued answer.
type verdict int8

const (
	fail    verdict = iota // the data does not conform
	pass                   // the data conforms
	unknown                // the fast path cannot decide; ask the library
)

// not inverts a verdict, keeping unknown.
func (v verdict) not() verdict {
	switch v {
	case pass:
		return fail
	case fail:
		return pass
	}
	return unknown
}

// and combines two verdicts that must both hold: a definite fail wins over
// unknown.
func (v verdict) and(w verdict) verdict {
	switch {
	case v == fail || w == fail:
		return fail
	case v == unknown || w == unknown:
		return unknown
	}
	return pass
}

// Bounds of the fast path; beyond them it answers unknown.
const (
	maxFastDepth   = 256     // nesting of the data
	maxFastEval    = 64      // schemas applied to one value without descending into it
	maxFastMembers = 64      // members of an object whose keys must be checked for duplicates
	maxFastPlain   = 300     // digits of a number that cannot be beyond a float64's range
	maxFastData    = 1 << 30 // bytes, so offsets fit in int32
)

// JSON types, as bits so a node can list several.
const (
	tNull = 1 << iota
	tBoolean
	tNumber
	tInteger
	tString
	tArray
	tObject
)

// fastNode is one compiled schema, read from the library's
// *jsonschema.Schema.
type fastNode struct {
	unsupported bool // uses a keyword the fast path does not implement

	isBool, boolVal bool // a boolean schema
	types           int  // tNull|...; 0 when type is absent
	enum            []any
	hasEnum         bool
	format          *jsonschema.Format
	ref             *fastNode

	minProps, maxProps int // -1 when absent
	required           []string
	props              map[string]*fastNode
	additional         *fastNode // nil: additionalProperties absent
	depSchemas         map[string]*fastNode
	depRequired        map[string][]string
	inspectsMembers    bool // some keyword depends on the object's members

	minItems, maxItems int // -1 when absent
	prefixItems        []*fastNode
	items              *fastNode

	minLength, maxLength int // -1 when absent
	pattern              *regexp.Regexp
	classes              classSeq // the pattern without regexp, when it has that shape

	minimum, maximum, exclMinimum, exclMaximum *decimal

	not                        *fastNode
	allOf, anyOf, oneOf        []*fastNode
	ifNode, thenNode, elseNode *fastNode
}

// handledFields are the fields of jsonschema.Schema that compileFast reads
// or that do not affect validation; any other field set makes the node
// unsupported, so a keyword added to a schema later is never ignored.
var handledFields = map[string]bool{
	"DraftVersion": true, "Location": true, "ID": true, "Anchor": true, "DynamicAnchor": true, "RecursiveAnchor": true,
	"Bool": true, "Ref": true, "Types": true, "Enum": true, "Const": true, "Not": true, "AllOf": true, "AnyOf": true,
	"OneOf": true, "If": true, "Then": true, "Else": true, "Format": true,
	"MaxProperties": true, "MinProperties": true, "Required": true, "Properties": true, "AdditionalProperties": true,
	"DependentRequired": true, "DependentSchemas": true,
	"MinItems": true, "MaxItems": true, "UniqueItems": true, "PrefixItems": true, "Items2020": true,
	"MinLength": true, "MaxLength": true, "Pattern": true,
	"Maximum": true, "Minimum": true, "ExclusiveMaximum": true, "ExclusiveMinimum": true,
	// annotations
	"Title": true, "Description": true, "Default": true, "Comment": true, "ReadOnly": true, "WriteOnly": true,
	"Examples": true, "Deprecated": true,
}

// compileFast builds the fast path of a compiled schema. It returns nil
// when the schema can reach itself without descending into the data (a
// $ref cycle, which the library reports as an error).
func compileFast(s *jsonschema.Schema) *fastNode {
	c := fastCompiler{nodes: map[*jsonschema.Schema]*fastNode{}}
	root := c.node(s)
	if c.hasSelfCycle() {
		return nil
	}
	return root
}

// newFastNode returns a node with no keyword.
func newFastNode() *fastNode {
	return &fastNode{minProps: -1, maxProps: -1, minItems: -1, maxItems: -1, minLength: -1, maxLength: -1}
}

type fastCompiler struct {
	nodes map[*jsonschema.Schema]*fastNode
}

func (c *fastCompiler) node(s *jsonschema.Schema) *fastNode {
	if s == nil {
		return nil
	}
	if n, ok := c.nodes[s]; ok {
		return n
	}
	n := newFastNode()
	c.nodes[s] = n

	rv := reflect.ValueOf(s).Elem()
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.IsExported() && !handledFields[f.Name] && !rv.Field(i).IsZero() {
			n.unsupported = true
		}
	}
	// Draft 2019 changed $ref (siblings apply) and items; only 2019+ here.
	if s.DraftVersion < 2019 || s.UniqueItems {
		n.unsupported = true
	}

	if s.Bool != nil {
		n.isBool, n.boolVal = true, *s.Bool
	}
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			n.types |= typeBit(t)
		}
	}
	if s.Enum != nil {
		n.enum, n.hasEnum = s.Enum.Values, true
	}
	if s.Const != nil {
		// const is enum with one value; both keywords may be present, so
		// const is kept apart as an allOf member.
		k := newFastNode()
		k.hasEnum, k.enum = true, []any{*s.Const}
		n.allOf = append(n.allOf, k)
	}
	n.format = s.Format
	n.ref = c.node(s.Ref)

	n.minProps, n.maxProps = intOr(s.MinProperties), intOr(s.MaxProperties)
	n.required = s.Required
	if len(s.Properties) > 0 {
		n.props = make(map[string]*fastNode, len(s.Properties))
		for k, v := range s.Properties {
			n.props[k] = c.node(v)
		}
	}
	switch a := s.AdditionalProperties.(type) {
	case nil:
	case bool:
		n.additional = newFastNode()
		n.additional.isBool, n.additional.boolVal = true, a
	case *jsonschema.Schema:
		n.additional = c.node(a)
	default:
		n.unsupported = true
	}
	if len(s.DependentSchemas) > 0 {
		n.depSchemas = make(map[string]*fastNode, len(s.DependentSchemas))
		for k, v := range s.DependentSchemas {
			n.depSchemas[k] = c.node(v)
		}
	}
	n.depRequired = s.DependentRequired
	n.inspectsMembers = n.minProps >= 0 || n.maxProps >= 0 || len(n.required) > 0 || n.props != nil ||
		n.additional != nil || n.depSchemas != nil || len(n.depRequired) > 0

	n.minItems, n.maxItems = intOr(s.MinItems), intOr(s.MaxItems)
	for _, p := range s.PrefixItems {
		n.prefixItems = append(n.prefixItems, c.node(p))
	}
	n.items = c.node(s.Items2020)

	n.minLength, n.maxLength = intOr(s.MinLength), intOr(s.MaxLength)
	if s.Pattern != nil {
		if re, ok := s.Pattern.(*regexp.Regexp); ok { // the library's default engine
			n.pattern, n.classes = re, compilePattern(re.String())
		} else {
			n.unsupported = true
		}
	}

	var ok bool
	if n.minimum, ok = boundOf(s.Minimum); !ok {
		n.unsupported = true
	}
	if n.maximum, ok = boundOf(s.Maximum); !ok {
		n.unsupported = true
	}
	if n.exclMinimum, ok = boundOf(s.ExclusiveMinimum); !ok {
		n.unsupported = true
	}
	if n.exclMaximum, ok = boundOf(s.ExclusiveMaximum); !ok {
		n.unsupported = true
	}

	n.not = c.node(s.Not)
	for _, x := range s.AllOf {
		n.allOf = append(n.allOf, c.node(x))
	}
	for _, x := range s.AnyOf {
		n.anyOf = append(n.anyOf, c.node(x))
	}
	for _, x := range s.OneOf {
		n.oneOf = append(n.oneOf, c.node(x))
	}
	n.ifNode, n.thenNode, n.elseNode = c.node(s.If), c.node(s.Then), c.node(s.Else)
	return n
}

// hasSelfCycle reports whether some compiled node applies itself to the
// same value again, through $ref, allOf, not, if and the like.
func (c *fastCompiler) hasSelfCycle() bool {
	const (
		white = iota
		grey
		black
	)
	color := map[*fastNode]int{}
	var visit func(n *fastNode) bool
	visit = func(n *fastNode) bool {
		if n == nil || color[n] == black {
			return false
		}
		if color[n] == grey {
			return true
		}
		color[n] = grey
		same := []*fastNode{n.ref, n.not, n.ifNode, n.thenNode, n.elseNode}
		same = append(same, n.allOf...)
		same = append(same, n.anyOf...)
		same = append(same, n.oneOf...)
		for _, d := range n.depSchemas {
			same = append(same, d)
		}
		for _, m := range same {
			if visit(m) {
				return true
			}
		}
		color[n] = black
		return false
	}
	for _, n := range c.nodes {
		if visit(n) {
			return true
		}
	}
	return false
}

func typeBit(t string) int {
	switch t {
	case "null":
		return tNull
	case "boolean":
		return tBoolean
	case "number":
		return tNumber
	case "integer":
		return tInteger
	case "string":
		return tString
	case "array":
		return tArray
	case "object":
		return tObject
	}
	return 0
}

func intOr(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// decimal is an exact finite decimal number: sign, integer digits without
// leading zeros, fraction digits without trailing zeros. Zero is
// {false, "", ""}.
type decimal struct {
	neg       bool
	int, frac []byte
}

// boundOf turns a schema bound into a decimal; ok is false when the bound
// has no finite decimal form (the fast path then leaves it to the library).
func boundOf(r *big.Rat) (*decimal, bool) {
	if r == nil {
		return nil, true
	}
	prec, exact := r.FloatPrec()
	if !exact {
		return nil, false
	}
	d, ok := parseDecimal([]byte(r.FloatString(prec)))
	if !ok {
		return nil, false
	}
	return &d, true
}

// parseDecimal reads a JSON number without an exponent.
func parseDecimal(lit []byte) (decimal, bool) {
	var d decimal
	if len(lit) > 0 && lit[0] == '-' {
		d.neg = true
		lit = lit[1:]
	}
	if bytes.ContainsAny(lit, "eE") {
		return d, false
	}
	ip, fp, _ := bytes.Cut(lit, []byte{'.'})
	d.int = bytes.TrimLeft(ip, "0")
	d.frac = bytes.TrimRight(fp, "0")
	if len(d.int) == 0 && len(d.frac) == 0 {
		d.neg = false
	}
	return d, true
}

// cmp compares two decimals exactly: -1, 0 or +1.
func (a decimal) cmp(b decimal) int {
	if a.neg != b.neg {
		if a.neg {
			return -1
		}
		return 1
	}
	c := len(a.int) - len(b.int)
	if c == 0 {
		c = bytes.Compare(a.int, b.int)
	}
	if c == 0 {
		c = bytes.Compare(a.frac, b.frac)
	}
	c = min(max(c, -1), 1)
	if a.neg {
		return -c
	}
	return c
}

// --- the data, parsed ---

// jsonKind is the kind of a parsed value.
type jsonKind uint8

const (
	jNull jsonKind = iota + 1
	jFalse
	jTrue
	jNumber
	jString
	jArray
	jObject
)

// jval is one value of the parsed data. Values form a tree by index:
// first child and next sibling; a member's key is kept on its value.
type jval struct {
	kind       jsonKind
	escaped    bool  // string: has escapes (its decoded form differs from the raw bytes)
	frac, exp  bool  // number: has a fraction, an exponent
	keyArena   bool  // key span is in the arena (it had escapes), not in the data
	dups       int8  // object: 0 not checked, 1 no duplicate keys, 2 duplicate keys
	start, end int32 // raw bytes: a string's contents without quotes, a number's literal
	keyStart   int32 // member key span
	keyEnd     int32 //
	child      int32 // first child, -1 if none
	next       int32 // next sibling, -1 if none
	n          int32 // number of children
}

// fastState holds one validation's buffers; pooled.
type fastState struct {
	data  []byte
	vals  []jval
	arena []byte // decoded keys and strings
	keys  [][]byte
	i     int
	depth int
}

var fastPool = sync.Pool{New: func() any { return &fastState{vals: make([]jval, 0, 64), arena: make([]byte, 0, 256)} }}

// fastCheck checks data against root. It never returns fail for valid
// data nor pass for invalid data; unknown when it cannot tell.
func fastCheck(root *fastNode, data []byte) verdict {
	if root == nil || len(data) > maxFastData {
		return unknown
	}
	st := fastPool.Get().(*fastState)
	defer func() {
		st.data = nil
		if cap(st.vals) <= 4096 && cap(st.arena) <= 1<<16 {
			fastPool.Put(st)
		}
	}()
	if !utf8.Valid(data) {
		return unknown
	}
	st.data, st.vals, st.arena, st.i, st.depth = data, st.vals[:0], st.arena[:0], 0, 0
	st.skipSpace()
	if st.i >= len(data) || data[st.i] != '{' {
		return unknown // not an object, or not JSON: the library says which
	}
	top, ok := st.value()
	if !ok {
		return unknown
	}
	st.skipSpace()
	if st.i != len(data) {
		return unknown
	}
	v := st.eval(root, top, 0)
	if v == pass && !st.uniqueNames() {
		return unknown // the library path refuses it, saying where
	}
	return v
}

// uniqueNames reports whether no object of the data, checked by the schema
// or free-form, names a member twice (false as well when an object has
// more members than the fast path compares): data agentq refuses.
func (st *fastState) uniqueNames() bool {
	for i := range st.vals {
		if st.vals[i].kind != jObject || st.vals[i].n < 2 {
			continue
		}
		if dup, ok := st.hasDuplicateKeys(int32(i)); dup || !ok {
			return false
		}
	}
	return true
}

func (st *fastState) skipSpace() {
	for st.i < len(st.data) {
		switch st.data[st.i] {
		case ' ', '\t', '\n', '\r':
			st.i++
		default:
			return
		}
	}
}

// value parses one JSON value at st.i, as encoding/json would accept it,
// and returns its index. ok is false on a syntax error and on whatever
// the fast path leaves to the library (deep nesting, a number the
// validator refuses).
func (st *fastState) value() (idx int32, ok bool) {
	st.skipSpace()
	if st.i >= len(st.data) {
		return 0, false
	}
	idx = int32(len(st.vals))
	st.vals = append(st.vals, jval{child: -1, next: -1})
	switch c := st.data[st.i]; {
	case c == '{':
		return idx, st.object(idx)
	case c == '[':
		return idx, st.array(idx)
	case c == '"':
		start, end, esc, ok := st.str()
		v := &st.vals[idx]
		v.kind, v.start, v.end, v.escaped = jString, start, end, esc
		return idx, ok
	case c == 't':
		st.vals[idx].kind = jTrue
		return idx, st.literal("true")
	case c == 'f':
		st.vals[idx].kind = jFalse
		return idx, st.literal("false")
	case c == 'n':
		st.vals[idx].kind = jNull
		return idx, st.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return idx, st.number(idx)
	}
	return 0, false
}

func (st *fastState) literal(lit string) bool {
	if !bytes.HasPrefix(st.data[st.i:], []byte(lit)) {
		return false
	}
	st.i += len(lit)
	return true
}

func (st *fastState) object(idx int32) bool {
	if st.depth++; st.depth > maxFastDepth {
		return false
	}
	defer func() { st.depth-- }()
	st.vals[idx].kind = jObject
	st.i++ // {
	st.skipSpace()
	if st.i < len(st.data) && st.data[st.i] == '}' {
		st.i++
		return true
	}
	prev := int32(-1)
	for {
		st.skipSpace()
		if st.i >= len(st.data) || st.data[st.i] != '"' {
			return false
		}
		ks, ke, esc, ok := st.str()
		if !ok {
			return false
		}
		inArena := false
		if esc {
			a := len(st.arena)
			st.arena = unquote(st.arena, st.data[ks:ke])
			ks, ke, inArena = int32(a), int32(len(st.arena)), true
		}
		st.skipSpace()
		if st.i >= len(st.data) || st.data[st.i] != ':' {
			return false
		}
		st.i++
		child, ok := st.value()
		if !ok {
			return false
		}
		cv := &st.vals[child]
		cv.keyStart, cv.keyEnd, cv.keyArena = ks, ke, inArena
		if prev < 0 {
			st.vals[idx].child = child
		} else {
			st.vals[prev].next = child
		}
		prev = child
		st.vals[idx].n++
		st.skipSpace()
		if st.i >= len(st.data) {
			return false
		}
		switch st.data[st.i] {
		case ',':
			st.i++
		case '}':
			st.i++
			return true
		default:
			return false
		}
	}
}

func (st *fastState) array(idx int32) bool {
	if st.depth++; st.depth > maxFastDepth {
		return false
	}
	defer func() { st.depth-- }()
	st.vals[idx].kind = jArray
	st.i++ // [
	st.skipSpace()
	if st.i < len(st.data) && st.data[st.i] == ']' {
		st.i++
		return true
	}
	prev := int32(-1)
	for {
		child, ok := st.value()
		if !ok {
			return false
		}
		if prev < 0 {
			st.vals[idx].child = child
		} else {
			st.vals[prev].next = child
		}
		prev = child
		st.vals[idx].n++
		st.skipSpace()
		if st.i >= len(st.data) {
			return false
		}
		switch st.data[st.i] {
		case ',':
			st.i++
		case ']':
			st.i++
			return true
		default:
			return false
		}
	}
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (st *fastState) number(idx int32) bool {
	d, i := st.data, st.i
	start := i
	digits := func() bool {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > j
	}
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return false
	}
	v := &st.vals[idx]
	v.kind = jNumber
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return false
		}
		v.frac = true
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
		v.exp = true
	}
	v.start, v.end = int32(start), int32(i)
	st.i = i
	// The numbers Validate refuses before validating (see numberProblem):
	// only long ones or ones with an exponent can be among them.
	if v.exp || i-start > maxFastPlain {
		if numberProblem(json.Number(d[start:i])) != "" {
			return false
		}
	}
	return true
}

// plain marks the bytes a string holds as they are: all but the quote,
// the backslash and control characters. (fastCheck has checked UTF-8.)
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x100; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Eight bytes at a time: whether any is a quote, a backslash or a control
// character (the classic "has a zero byte" and "has a byte less than n"
// bit tricks, exact as to whether there is one).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func special8(x uint64) bool {
	ctl := (x - 0x20*ones) &^ x
	q := x ^ ('"' * ones)
	q = (q - ones) &^ q
	b := x ^ ('\\' * ones)
	b = (b - ones) &^ b
	return (ctl|q|b)&highs != 0
}

// str scans a string at st.i (on its opening quote) and checks its escapes
// as encoding/json does.
func (st *fastState) str() (start, end int32, escaped, ok bool) {
	d := st.data
	i := st.i + 1
	start = int32(i)
	for i < len(d) {
		for i+8 <= len(d) && !special8(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i >= len(d) {
			break
		}
		switch d[i] {
		case '"':
			st.i = i + 1
			return start, int32(i), escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(d) {
				return 0, 0, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if getu4(d[i:]) < 0 {
					return 0, 0, false, false
				}
				i += 6
			default:
				return 0, 0, false, false
			}
		default: // a control character
			return 0, 0, false, false
		}
	}
	return 0, 0, false, false
}

// runes returns the length of a string value, decoded, in code points,
// as the library counts it. Only what a bound needs is counted: no string
// has more code points than raw bytes, since every escape is longer than
// what it stands for.
func (st *fastState) runes(v *jval, atMost int) int {
	raw := st.data[v.start:v.end]
	if len(raw) <= atMost {
		return len(raw)
	}
	return utf8.RuneCount(st.text(v))
}

// getu4 decodes \uXXXX at the start of s, or returns -1 (encoding/json's).
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unquote appends the decoded form of a string's raw contents, already
// checked by str, to dst, as encoding/json decodes it.
func unquote(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := getu4(s[i:])
			i += 6
			if utf16.IsSurrogate(r) {
				if dec := utf16.DecodeRune(r, getu4(s[i:])); dec != unicode.ReplacementChar {
					i += 6
					dst = utf8.AppendRune(dst, dec)
					continue
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // " \ /
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}

// key returns a member's key, decoded.
func (st *fastState) key(v *jval) []byte {
	if v.keyArena {
		return st.arena[v.keyStart:v.keyEnd]
	}
	return st.data[v.keyStart:v.keyEnd]
}

// text returns a string value, decoded. Decoding an escaped string
// appends to the arena.
func (st *fastState) text(v *jval) []byte {
	raw := st.data[v.start:v.end]
	if !v.escaped {
		return raw
	}
	a := len(st.arena)
	st.arena = unquote(st.arena, raw)
	return st.arena[a:]
}

// hasDuplicateKeys reports whether an object repeats a key: encoding/json
// keeps the last, the raw bytes hold both. ok is false beyond
// maxFastMembers.
func (st *fastState) hasDuplicateKeys(obj int32) (dup, ok bool) {
	switch st.vals[obj].dups {
	case 1:
		return false, true
	case 2:
		return true, true
	}
	if st.vals[obj].n > maxFastMembers {
		return false, false
	}
	st.keys = st.keys[:0]
	for c := st.vals[obj].child; c >= 0; c = st.vals[c].next {
		st.keys = append(st.keys, st.key(&st.vals[c]))
	}
	slices.SortFunc(st.keys, bytes.Compare)
	for i := 1; i < len(st.keys); i++ {
		if bytes.Equal(st.keys[i-1], st.keys[i]) {
			dup = true
			break
		}
	}
	st.vals[obj].dups = 1
	if dup {
		st.vals[obj].dups = 2
	}
	return dup, true
}

// member returns the index of obj's member named name, or -1.
func (st *fastState) member(obj int32, name string) int32 {
	for c := st.vals[obj].child; c >= 0; c = st.vals[c].next {
		if string(st.key(&st.vals[c])) == name {
			return c
		}
	}
	return -1
}

// --- evaluation ---

// eval applies n to value v. depth counts schemas applied to v without
// descending into it.
func (st *fastState) eval(n *fastNode, v int32, depth int) verdict {
	if n == nil {
		return pass
	}
	if n.unsupported || depth > maxFastEval {
		return unknown
	}
	if n.isBool {
		if n.boolVal {
			return pass
		}
		return fail
	}
	res := pass
	val := &st.vals[v]
	if n.types != 0 {
		if r := st.typeMatches(n.types, val); r != pass {
			return r
		}
	}
	if n.hasEnum {
		if r := st.enumMatches(n.enum, v); r != pass {
			return r
		}
	}
	if n.format != nil {
		if r := st.formatMatches(n.format, v); r != pass {
			return r
		}
	}
	if n.ref != nil {
		if res = res.and(st.eval(n.ref, v, depth+1)); res == fail {
			return fail
		}
	}
	switch st.vals[v].kind {
	case jObject:
		res = res.and(st.evalObject(n, v, depth))
	case jArray:
		res = res.and(st.evalArray(n, v, depth))
	case jString:
		res = res.and(st.evalString(n, v))
	case jNumber:
		res = res.and(st.evalNumber(n, v))
	}
	if res == fail {
		return fail
	}
	if n.not != nil {
		res = res.and(st.eval(n.not, v, depth+1).not())
	}
	for _, x := range n.allOf {
		if res = res.and(st.eval(x, v, depth+1)); res == fail {
			return fail
		}
	}
	if len(n.anyOf) > 0 {
		any := fail
		for _, x := range n.anyOf {
			r := st.eval(x, v, depth+1)
			if r == pass {
				any = pass
				break
			}
			if r == unknown {
				any = unknown
			}
		}
		res = res.and(any)
	}
	if len(n.oneOf) > 0 {
		passes, unknowns := 0, 0
		for _, x := range n.oneOf {
			switch st.eval(x, v, depth+1) {
			case pass:
				passes++
			case unknown:
				unknowns++
			}
		}
		switch {
		case passes > 1:
			res = fail
		case unknowns > 0:
			res = res.and(unknown)
		case passes == 0:
			res = fail
		}
	}
	if n.ifNode != nil {
		switch st.eval(n.ifNode, v, depth+1) {
		case pass:
			res = res.and(st.eval(n.thenNode, v, depth+1))
		case fail:
			res = res.and(st.eval(n.elseNode, v, depth+1))
		default:
			res = res.and(unknown)
		}
	}
	return res
}

func (st *fastState) typeMatches(types int, v *jval) verdict {
	var t int
	switch v.kind {
	case jNull:
		t = tNull
	case jFalse, jTrue:
		t = tBoolean
	case jString:
		t = tString
	case jArray:
		t = tArray
	case jObject:
		t = tObject
	case jNumber:
		if types&tNumber != 0 {
			return pass
		}
		if types&tInteger == 0 {
			return fail
		}
		return st.isInteger(v)
	}
	if types&t != 0 {
		return pass
	}
	return fail
}

// isInteger: the library takes a number with a zero fraction (2.0) as an
// integer.
func (st *fastState) isInteger(v *jval) verdict {
	switch {
	case v.exp:
		return unknown
	case !v.frac:
		return pass
	}
	lit := st.data[v.start:v.end]
	_, frac, _ := bytes.Cut(lit, []byte{'.'})
	if len(bytes.TrimRight(frac, "0")) == 0 {
		return pass
	}
	return fail
}

// enumMatches compares v with each value as the library's equals does:
// strings, booleans and null by value, a number never equal to a
// non-number; numbers, arrays and objects against values of their own
// kind are left to the library.
func (st *fastState) enumMatches(values []any, v int32) verdict {
	val := &st.vals[v]
	var s []byte
	if val.kind == jString {
		s = st.text(val)
	}
	for _, e := range values {
		switch e := e.(type) {
		case string:
			if val.kind == jString && string(s) == e {
				return pass
			}
		case bool:
			if val.kind == jTrue && e || val.kind == jFalse && !e {
				return pass
			}
		case nil:
			if val.kind == jNull {
				return pass
			}
		case json.Number, float64, int:
			if val.kind == jNumber {
				return unknown
			}
		case []any:
			if val.kind == jArray {
				return unknown
			}
		case map[string]any:
			if val.kind == jObject {
				return unknown
			}
		default:
			return unknown
		}
	}
	return fail
}

// formatMatches runs the library's own format check on the value it would
// get: a string, a bool, nil or a json.Number.
func (st *fastState) formatMatches(f *jsonschema.Format, v int32) verdict {
	val := &st.vals[v]
	var x any
	switch val.kind {
	case jString:
		x = string(st.text(val))
	case jTrue:
		x = true
	case jFalse:
		x = false
	case jNull:
		x = nil
	case jNumber:
		x = json.Number(st.data[val.start:val.end])
	default:
		return unknown
	}
	if f.Validate(x) != nil {
		return fail
	}
	return pass
}

func (st *fastState) evalObject(n *fastNode, obj int32, depth int) verdict {
	if !n.inspectsMembers {
		return pass
	}
	if dup, ok := st.hasDuplicateKeys(obj); dup || !ok {
		return unknown // the library sees only the last of each key
	}
	res := pass
	o := st.vals[obj]
	if n.minProps >= 0 && int(o.n) < n.minProps || n.maxProps >= 0 && int(o.n) > n.maxProps {
		return fail
	}
	for _, name := range n.required {
		if st.member(obj, name) < 0 {
			return fail
		}
	}
	for c := o.child; c >= 0; c = st.vals[c].next {
		key := st.key(&st.vals[c])
		sub, ok := n.props[string(key)]
		if !ok {
			sub = n.additional
		}
		if sub != nil {
			if res = res.and(st.eval(sub, c, 0)); res == fail {
				return fail
			}
		}
	}
	for name, sub := range n.depSchemas {
		if st.member(obj, name) >= 0 {
			if res = res.and(st.eval(sub, obj, depth+1)); res == fail {
				return fail
			}
		}
	}
	for name, req := range n.depRequired {
		if st.member(obj, name) < 0 {
			continue
		}
		for _, r := range req {
			if st.member(obj, r) < 0 {
				return fail
			}
		}
	}
	return res
}

func (st *fastState) evalArray(n *fastNode, arr int32, depth int) verdict {
	a := st.vals[arr]
	if n.minItems >= 0 && int(a.n) < n.minItems || n.maxItems >= 0 && int(a.n) > n.maxItems {
		return fail
	}
	res := pass
	i := 0
	for c := a.child; c >= 0; c = st.vals[c].next {
		sub := n.items
		if i < len(n.prefixItems) {
			sub = n.prefixItems[i]
		}
		i++
		if sub != nil {
			if res = res.and(st.eval(sub, c, 0)); res == fail {
				return fail
			}
		}
	}
	return res
}

func (st *fastState) evalString(n *fastNode, s int32) verdict {
	v := &st.vals[s]
	if n.maxLength >= 0 && st.runes(v, n.maxLength) > n.maxLength {
		return fail
	}
	if n.minLength > 1 && st.runes(v, 0) < n.minLength || n.minLength == 1 && v.start == v.end {
		return fail
	}
	if n.classes != nil {
		if !n.classes.match(st.text(v)) {
			return fail
		}
	} else if n.pattern != nil && !n.pattern.Match(st.text(v)) {
		return fail
	}
	return pass
}

func (st *fastState) evalNumber(n *fastNode, num int32) verdict {
	if n.minimum == nil && n.maximum == nil && n.exclMinimum == nil && n.exclMaximum == nil {
		return pass
	}
	v := &st.vals[num]
	if v.exp {
		return unknown
	}
	d, ok := parseDecimal(st.data[v.start:v.end])
	if !ok {
		return unknown
	}
	if n.minimum != nil && d.cmp(*n.minimum) < 0 ||
		n.maximum != nil && d.cmp(*n.maximum) > 0 ||
		n.exclMinimum != nil && d.cmp(*n.exclMinimum) <= 0 ||
		n.exclMaximum != nil && d.cmp(*n.exclMaximum) >= 0 {
		return fail
	}
	return pass
}

// --- patterns ---

// classSeq matches the patterns the contract uses for names and ids, such
// as ^[A-Za-z_][A-Za-z0-9_]{0,63}$, without the regexp engine: the whole
// string is a sequence of ASCII character classes, each repeated between
// min and max times. compilePattern builds one only where matching greedily
// gives regexp's answer.
type classSeq []classRep

type classRep struct {
	set      [256]bool
	min, max int // max -1: unbounded
}

// compilePattern returns the classSeq equivalent to the regexp expr, or
// nil when expr has another shape.
func compilePattern(expr string) classSeq {
	re, err := syntax.Parse(expr, syntax.Perl) // as regexp.Compile parses
	if err != nil || re.Op != syntax.OpConcat || len(re.Sub) < 3 {
		return nil
	}
	subs := re.Sub
	if subs[0].Op != syntax.OpBeginText || subs[len(subs)-1].Op != syntax.OpEndText {
		return nil
	}
	var seq classSeq
	for _, s := range subs[1 : len(subs)-1] {
		min, max := 1, 1
		switch s.Op {
		case syntax.OpRepeat:
			min, max = s.Min, s.Max
		case syntax.OpStar:
			min, max = 0, -1
		case syntax.OpPlus:
			min, max = 1, -1
		case syntax.OpQuest:
			min, max = 0, 1
		}
		if min != 1 || max != 1 || s.Op == syntax.OpRepeat {
			if len(s.Sub) != 1 {
				return nil
			}
			s = s.Sub[0]
		}
		var rep classRep
		rep.min, rep.max = min, max
		switch {
		case s.Op == syntax.OpCharClass:
			for i := 0; i+1 < len(s.Rune); i += 2 {
				lo, hi := s.Rune[i], s.Rune[i+1]
				if hi >= utf8.RuneSelf {
					return nil
				}
				for c := lo; c <= hi; c++ {
					rep.set[c] = true
				}
			}
		case s.Op == syntax.OpLiteral && s.Flags&syntax.FoldCase == 0 && len(s.Rune) == 1 && s.Rune[0] < utf8.RuneSelf:
			rep.set[s.Rune[0]] = true
		default:
			return nil
		}
		seq = append(seq, rep)
	}
	// Greedy is exact when each variable class but the last cannot take a
	// character the next class needs: the next class is required and
	// shares no character with it.
	for i := 0; i+1 < len(seq); i++ {
		if seq[i].min == seq[i].max {
			continue
		}
		if seq[i+1].min == 0 {
			return nil
		}
		for c := range seq[i].set {
			if seq[i].set[c] && seq[i+1].set[c] {
				return nil
			}
		}
	}
	return seq
}

// match reports whether s matches the whole sequence.
func (seq classSeq) match(s []byte) bool {
	i := 0
	for _, r := range seq {
		n := 0
		for i < len(s) && (r.max < 0 || n < r.max) && r.set[s[i]] {
			i++
			n++
		}
		if n < r.min {
			return false
		}
	}
	return i == len(s)
}
