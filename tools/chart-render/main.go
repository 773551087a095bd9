// chart-render renders a Helm chart the way `helm template` does, with the engine Helm uses: Go's
// text/template, the sprig function library and Helm's own functions (include, tpl, required,
// toYaml, fromYaml, toJson, fromJson, lookup), values merged over the chart's values.yaml and
// validated against its values.schema.json (gojsonschema, as Helm). No helm binary is reachable
// from this project's registries; Debian ships the libraries, built here in GOPATH mode:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/chart-render ./tools/chart-render
//	build/chart-render -f values.yaml --namespace mcm --include-crds helm/mcm-tasks
//
// What it leaves out: subcharts, hooks, `helm install`'s cluster lookups (lookup returns nothing,
// as under `helm template`), Chart.lock and --set (write a values file).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
	"github.com/xeipuuv/gojsonschema"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Capabilities is what .Capabilities offers a template.
type Capabilities struct {
	KubeVersion struct{ Version, Major, Minor string }
	APIVersions apiVersions
}

type apiVersions []string

// Has reports whether the (pretended) cluster serves a group/version or group/version/Kind.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func main() {
	var valueFiles, apiVers, showOnly listFlag
	flag.Var(&valueFiles, "f", "values file, merged over the chart's values.yaml (repeatable)")
	flag.Var(&apiVers, "api-versions", "API versions the cluster is taken to serve (repeatable)")
	flag.Var(&showOnly, "show-only", "render only this template, e.g. templates/rbac-target.yaml (repeatable)")
	namespace := flag.String("namespace", "default", "release namespace")
	release := flag.String("release-name", "mcm-tasks", "release name")
	kubeVersion := flag.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
	includeCRDs := flag.Bool("include-crds", false, "print the chart's crds/ first")
	notes := flag.Bool("notes", false, "also render NOTES.txt, after the manifests")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: chart-render [flags] CHART_DIR")
		os.Exit(2)
	}
	out, err := render(flag.Arg(0), options{valueFiles, apiVers, showOnly, *namespace, *release, *kubeVersion, *includeCRDs, *notes})
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

type options struct {
	valueFiles, apiVersions, showOnly []string
	namespace, release, kubeVersion   string
	includeCRDs, notes                bool
}

func readYAML(file string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, nil
}

// coalesce merges src over dst as Helm does: maps recursively, a null in src deletes the key.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = coalesce(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

func validate(chart string, values map[string]interface{}) error {
	schema, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	doc, _ := json.Marshal(values)
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	if !result.Valid() {
		var msgs []string
		for _, e := range result.Errors() {
			msgs = append(msgs, "- "+e.String())
		}
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s",
			strings.Join(msgs, "\n"))
	}
	return nil
}

func funcs(t *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		inline, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = inline.Execute(&buf, data)
		return strings.ReplaceAll(buf.String(), "<no value>", ""), err
	}
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(msg) }
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return f
}

func render(chart string, o options) (string, error) {
	meta, err := readYAML(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	values, err := readYAML(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, file := range o.valueFiles {
		user, err := readYAML(file)
		if err != nil {
			return "", err
		}
		values = coalesce(values, user)
	}
	if err := validate(chart, values); err != nil {
		return "", err
	}
	name, _ := meta["name"].(string)
	chartObj := map[string]interface{}{}
	for k, v := range meta { // .Chart.Name, .Chart.Version, .Chart.AppVersion …
		chartObj[strings.ToUpper(k[:1])+k[1:]] = v
	}
	caps := Capabilities{APIVersions: apiVersions(o.apiVersions)}
	caps.KubeVersion.Version = o.kubeVersion
	parts := strings.SplitN(strings.TrimPrefix(o.kubeVersion, "v"), ".", 3)
	if len(parts) >= 2 {
		caps.KubeVersion.Major, caps.KubeVersion.Minor = parts[0], parts[1]
	}
	release := map[string]interface{}{
		"Name": o.release, "Namespace": o.namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1,
	}

	files, err := filepath.Glob(filepath.Join(chart, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	t := template.New("gotpl")
	t.Option("missingkey=zero")
	t.Funcs(funcs(t))
	var names []string
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		tname := path.Join(name, "templates", filepath.Base(file))
		if _, err := t.New(tname).Parse(string(raw)); err != nil {
			return "", err
		}
		names = append(names, tname)
	}

	var out strings.Builder
	if o.includeCRDs {
		crds, _ := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
		sort.Strings(crds)
		for _, file := range crds {
			raw, err := os.ReadFile(file)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&out, "---\n# Source: %s/crds/%s\n%s\n", name, filepath.Base(file), strings.TrimSpace(string(raw)))
		}
	}
	var notes string
	for _, tname := range names {
		base := path.Base(tname)
		if strings.HasPrefix(base, "_") {
			continue
		}
		rel := strings.TrimPrefix(tname, name+"/")
		if len(o.showOnly) > 0 && !contains(o.showOnly, rel) {
			continue
		}
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": chartObj, "Capabilities": caps,
			"Template": map[string]interface{}{"Name": tname, "BasePath": path.Join(name, "templates")},
		}
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, tname, data); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			notes = text
			continue
		}
		for _, doc := range strings.Split(text, "\n---") {
			doc = strings.TrimSpace(strings.TrimPrefix(doc, "---"))
			if doc == "" || onlyComments(doc) {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tname, doc)
		}
	}
	if o.notes {
		fmt.Fprintf(&out, "\nNOTES:\n%s\n", notes)
	}
	return out.String(), nil
}

func onlyComments(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
