package kubectl

import (
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// newTabWriter is cli-runtime's printers.GetNewTabWriter: minimum width 6,
// tab width 4, padding 3, spaces. kubectl's writer is a fork of
// text/tabwriter (liggitt/tabwriter) whose RememberWidths flag keeps column
// widths across flushes; a table here is written in one flush, where the
// two lay out the same.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
}

// cell is how cli-runtime's table printer writes one string cell: cut at
// the first newline, carriage return or form feed, with "..." to say so.
func cell(s string) string {
	if i := strings.IndexAny(s, "\f\n\r"); i >= 0 {
		return s[:i] + "..."
	}
	return s
}

// PrintTable writes objs (all of resource r) as `kubectl get` does:
// upper-cased headers, tab-separated cells through the tab writer, the
// Priority 1 columns only when wide, a NAMESPACE column first when
// withNamespace and the resource is namespaced. An empty objs prints
// nothing (the caller says "No resources found").
//
// As the API server does (its table convertor always asks the printers for
// wide rows), every row is built wide and kubectl drops the columns it does
// not show, so a LoadBalancer's ingress list is never cut to 16 characters.
func PrintTable(w io.Writer, r *Resource, objs []Object, now time.Time, wide, withNamespace bool) error {
	return printTable(w, r, objs, now, wide, withNamespace, false)
}

// printTable is PrintTable; withKind names each object as "kind/name"
// ("deployment.apps/web"), as kubectl does when one get lists several
// resources.
func printTable(w io.Writer, r *Resource, objs []Object, now time.Time, wide, withNamespace, withKind bool) error {
	if len(objs) == 0 {
		return nil
	}
	withNamespace = withNamespace && r.Namespaced
	tw := newTabWriter(w)
	var line []string
	if withNamespace {
		line = append(line, "NAMESPACE")
	}
	for _, c := range r.columns {
		if c.wide && !wide {
			continue
		}
		line = append(line, strings.ToUpper(c.name))
	}
	io.WriteString(tw, strings.Join(line, "\t")+"\n")
	for _, o := range objs {
		line = line[:0]
		if withNamespace {
			line = append(line, o.GetNamespace())
		}
		cells := r.row(o, now, true)
		for i, c := range r.columns {
			if i >= len(cells) || (c.wide && !wide) {
				continue
			}
			if i == 0 && withKind && c.name == "Name" {
				cells[i] = r.NameOf(cells[i])
			}
			line = append(line, cell(cells[i]))
		}
		io.WriteString(tw, strings.Join(line, "\t")+"\n")
	}
	return tw.Flush()
}
