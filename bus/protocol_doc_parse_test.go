package bus

// Reading docs/PROTOCOL.md (its sections and tables) and bus's Go source
// (its exported names and JSON fields), for protocol_doc_test.go.

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

type (
	// problems collects what the checks find, each saying what is missing where.
	problems []string
	docRow   struct {
		cells []string
		line  int
	}
	docSection struct {
		heading string
		line    int      // of the heading
		lines   []string // up to the next heading of the same or a higher level
	}
	// protoDoc maps each heading of the page to its sections.
	protoDoc map[string][]*docSection
	goDecl   struct{ name, value, pos string }
	// goSource is what the test reads of the source: bus's exported string
	// constants (with their values), other constants and functions that
	// return a string; the structs with json tags of bus, selection and the
	// root package; the root package's string constants by type.
	goSource struct {
		strConsts, otherConsts, funcs, tagged []goDecl
		root                                  map[string][]string // Code, Status, SideEffects
	}
)

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

var (
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*$`)
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	spaceRE    = regexp.MustCompile(`\s+`)
	parenRE    = regexp.MustCompile(`\([^)]*\)`)
	cellSepRE  = regexp.MustCompile(`\s*\|\s*`)
)

func parseDoc(path string) (protoDoc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines, d := strings.Split(string(b), "\n"), protoDoc{}
	var at, level, fenced = []int{}, []int{}, false
	for i, l := range lines {
		fenced = fenced != strings.HasPrefix(l, "```")
		if m := headingRE.FindStringSubmatch(l); m != nil && !fenced {
			at, level = append(at, i), append(level, len(m[1]))
		}
	}
	for k := range at {
		end := len(lines)
		if j := slices.IndexFunc(level[k+1:], func(l int) bool { return l <= level[k] }); j >= 0 {
			end = at[k+1+j]
		}
		h := headingRE.FindStringSubmatch(lines[at[k]])[2]
		d[h] = append(d[h], &docSection{h, at[k] + 1, lines[at[k]+1 : end]})
	}
	return d, nil
}

func (d protoDoc) section(p *problems, heading string) *docSection {
	if s := d[heading]; len(s) == 1 {
		return s[0]
	}
	p.add("%s has %d headings %q; the test reads exactly one", docName, len(d[heading]), heading)
	return nil
}

func (s *docSection) where() string {
	return fmt.Sprintf("%s, section %q (line %d)", docName, s.heading, s.line)
}

func (s *docSection) text() string { return spaceRE.ReplaceAllString(strings.Join(s.lines, " "), " ") }

// tables returns the section's tables, each its header row and then its rows.
func (s *docSection) tables() (out [][]docRow) {
	in := false
	for i, l := range s.lines {
		if l = strings.TrimSpace(l); !strings.HasPrefix(l, "|") {
			in = false
			continue
		}
		cells := cellSepRE.Split(strings.Trim(l, "| "), -1)
		if r := (docRow{cells, s.line + 1 + i}); !in {
			out, in = append(out, []docRow{r}), true
		} else if strings.Trim(cells[0], "-: ") != "" { // not the separator row
			out[len(out)-1] = append(out[len(out)-1], r)
		}
	}
	return out
}

// table returns the rows of the section's first table whose first column is col.
func (s *docSection) table(p *problems, col string) []docRow {
	for _, t := range s.tables() {
		if t[0].cells[0] == col {
			return t[1:]
		}
	}
	p.add("%s has no table whose first column is %q", s.where(), col)
	return nil
}

func spans(s string) (out []string) {
	for _, m := range codeSpanRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

func firstSpan(cell string) string { return append(spans(cell), "")[0] }

// subjMatch reports whether the page's code span writes the subject or name
// v: the same, a `*` token of v written as <token>, or v as a header's value.
func subjMatch(v, span string) bool {
	if span == v || strings.HasPrefix(span, v+": ") || strings.HasSuffix(span, ": "+v) {
		return true
	}
	vt, st := strings.Split(v, "."), strings.Split(span, ".")
	for i := range vt {
		if len(vt) != len(st) || vt[i] != st[i] && (vt[i] != "*" || !strings.HasPrefix(st[i], "<")) {
			return false
		}
	}
	return strings.Contains(v, "*")
}

func anySpan(s *docSection, v string) bool {
	return slices.ContainsFunc(spans(s.text()), func(sp string) bool { return subjMatch(v, sp) })
}

func parseGo() (*goSource, error) {
	src, fset := &goSource{root: map[string][]string{}}, token.NewFileSet()
	for _, dir := range []string{".", "../selection", ".."} {
		names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, name := range slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, "_test.go") }) {
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			for _, decl := range f.Decls {
				src.collect(fset, f.Name.Name, dir == ".", decl)
			}
		}
	}
	return src, nil
}

func (src *goSource) collect(fset *token.FileSet, pkg string, bus bool, decl ast.Decl) {
	pos := func(n ast.Node) string { return fset.Position(n.Pos()).String() }
	if fd, ok := decl.(*ast.FuncDecl); ok && bus && fd.Recv == nil && fd.Name.IsExported() {
		if r := fd.Type.Results; r != nil && len(r.List) <= 2 && types.ExprString(r.List[0].Type) == "string" {
			src.funcs = append(src.funcs, goDecl{fd.Name.Name, "", pos(fd)})
		}
	} else if gd, ok := decl.(*ast.GenDecl); ok {
		for _, spec := range gd.Specs {
			if ts, ok := spec.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok && slices.ContainsFunc(st.Fields.List, func(f *ast.Field) bool {
					return f.Tag != nil && strings.Contains(f.Tag.Value, `json:"`)
				}) {
					src.tagged = append(src.tagged, goDecl{pkg + "." + ts.Name.Name, "", pos(ts)})
				}
			}
			vs, ok := spec.(*ast.ValueSpec)
			for i := 0; ok && gd.Tok == token.CONST && i < len(vs.Names); i++ {
				v, err := "", strconv.ErrSyntax // a string literal, or not a string constant
				if i < len(vs.Values) {
					v, err = strconv.Unquote(types.ExprString(vs.Values[i]))
				}
				switch n := vs.Names[i]; {
				case pkg == "teamster" && err == nil && vs.Type != nil:
					src.root[types.ExprString(vs.Type)] = append(src.root[types.ExprString(vs.Type)], v)
				case !bus || !n.IsExported():
				case err == nil:
					src.strConsts = append(src.strConsts, goDecl{n.Name, v, pos(n)})
				default:
					src.otherConsts = append(src.otherConsts, goDecl{n.Name, "", pos(n)})
				}
			}
		}
	}
}

// prefixed returns the values of bus's string constants whose names start
// with prefix.
func (src *goSource) prefixed(prefix string) (out []string) {
	for _, c := range src.strConsts {
		if strings.HasPrefix(c.name, prefix) {
			out = append(out, c.value)
		}
	}
	return out
}

var rawMessage = ty[json.RawMessage]()

// jsonFields appends t's JSON field names as encoding/json and go-json-experiment's v1 (which bus
// encodes with) write them, nested structs without a section as parent.field or parent[].field,
// and marks every struct it meets in seen.
func jsonFields(t reflect.Type, prefix string, own map[reflect.Type]bool, seen map[string]bool, out *[]string) {
	seen[t.String()] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft, sep := f.Type, "."
		for ft != rawMessage && (ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) {
			if ft.Kind() != reflect.Pointer {
				sep = "[]."
			}
			ft = ft.Elem()
		}
		embedded := f.Anonymous && name == "" && ft.Kind() == reflect.Struct
		if f.Tag.Get("json") == "-" || !embedded && !f.IsExported() {
			continue
		} else if name == "" {
			name = f.Name
		}
		if embedded {
			jsonFields(ft, prefix, own, seen, out)
		} else if *out = append(*out, prefix+name); ft.Kind() == reflect.Struct && !own[ft] {
			jsonFields(ft, prefix+name+sep, own, seen, out)
		}
	}
}
