use std::collections::HashMap;
use std::sync::Arc;

use quick_xml::events::Event;
use quick_xml::Reader;

use crate::analysis::{Analyzer, Tokenizer};
use crate::interval::Interval;
use crate::time::{parse_time, TimeFormat};

/// A parsed, validated dimensions document.
#[derive(Debug, Clone, Default)]
pub struct Dimensions {
    pub dims: Vec<Dimension>,
    by_id: HashMap<String, usize>,
}

#[derive(Debug, Clone)]
pub struct Dimension {
    pub id: String,
    /// Property names the values come from (`key`, default the id).
    pub keys: Vec<String>,
    pub ignore_case: bool,
    pub kind: DimensionKind,
}

#[derive(Debug, Clone)]
pub enum DimensionKind {
    Keyword,
    GroupBy,
    Text(TextSpec),
    Numeric(NumericSpec),
    Geo(GeoSpec),
    Tree(Arc<ElementSet>),
    Ordered(Arc<ElementSet>),
    Mutex(Arc<ElementSet>),
}

impl DimensionKind {
    /// The type name as the document writes it.
    pub fn type_name(&self) -> &'static str {
        match self {
            DimensionKind::Keyword => "keyword",
            DimensionKind::GroupBy => "groupBy",
            DimensionKind::Text(_) => "text",
            DimensionKind::Numeric(n) => match n.kind {
                NumericKind::Integer => "integer",
                NumericKind::Long => "long",
                NumericKind::Double => "double",
                NumericKind::Time(_) => "time",
            },
            DimensionKind::Geo(_) => "geoloc",
            DimensionKind::Tree(_) => "tree",
            DimensionKind::Ordered(_) => "ordered",
            DimensionKind::Mutex(_) => "mutex",
        }
    }

    pub fn elements(&self) -> Option<&ElementSet> {
        match self {
            DimensionKind::Tree(e) | DimensionKind::Ordered(e) | DimensionKind::Mutex(e) => Some(e),
            _ => None,
        }
    }
}

/// Every dimension type name, in the order statistics list them.
pub const TYPE_NAMES: &[&str] = &[
    "keyword", "text", "integer", "long", "double", "time", "geoloc", "tree", "ordered", "mutex",
    "groupBy",
];

#[derive(Debug, Clone)]
pub struct TextSpec {
    pub fields: Vec<TextField>,
    /// True when the dimension has no `field` children (its single field is itself).
    pub single: bool,
}

#[derive(Debug, Clone)]
pub struct TextField {
    pub id: String,
    pub keys: Vec<String>,
    pub analyzer: Analyzer,
    pub ignore_field_length: bool,
}

#[derive(Debug, Clone)]
pub enum NumericKind {
    Integer,
    Long,
    Double,
    Time(Option<TimeFormat>),
}

#[derive(Debug, Clone)]
pub struct NumericSpec {
    pub kind: NumericKind,
    /// Values outside are not indexed.
    pub bounds: Interval,
    /// Declared span (`max − min`) when both are given.
    pub declared_span: Option<f64>,
    pub ranges: Vec<RangeElement>,
}

impl NumericSpec {
    /// Whether values are whole numbers: integer, long and time values are (indexed as
    /// integers, compared as doubles); only a double dimension's are not.
    pub fn whole_numbers(&self) -> bool {
        !matches!(self.kind, NumericKind::Double)
    }

    /// Parses a bound or criterion value in the dimension's unit.
    pub fn parse_value(&self, s: &str) -> Option<f64> {
        let s = s.trim();
        match &self.kind {
            NumericKind::Time(fmt) => parse_time(s, fmt.as_ref()).map(|v| v as f64),
            _ => s.parse::<f64>().ok().filter(|v| v.is_finite()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RangeElement {
    pub id: String,
    pub name: Option<String>,
    pub interval: Interval,
}

#[derive(Debug, Clone)]
pub struct GeoSpec {
    pub latitude: String,
    pub longitude: String,
    pub zipcode: String,
}

/// The elements of a tree, ordered or mutex dimension, in document order.
#[derive(Debug, Clone, Default)]
pub struct ElementSet {
    pub elements: Vec<Element>,
    pub by_id: HashMap<String, u32>,
    /// Raw value (case folded when the dimension ignores case) → elements it tags.
    pub by_value: HashMap<String, Vec<u32>>,
    /// Top-level element indices in order.
    pub roots: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct Element {
    pub id: String,
    pub name: Option<String>,
    pub value: String,
    pub parent: Option<u32>,
    /// Top-level elements have depth 1.
    pub depth: u32,
    pub children: Vec<u32>,
}

impl ElementSet {
    /// Is `a` equal to `b` or one of its ancestors?
    pub fn is_ancestor_or_self(&self, a: u32, b: u32) -> bool {
        let mut cur = Some(b);
        while let Some(c) = cur {
            if c == a {
                return true;
            }
            cur = self.elements[c as usize].parent;
        }
        false
    }

    /// Depth of the lowest common ancestor of `a` and `b` (0 when none).
    pub fn lca_depth(&self, a: u32, b: u32) -> u32 {
        let mut x = a;
        let mut y = b;
        let (mut dx, mut dy) = (
            self.elements[x as usize].depth,
            self.elements[y as usize].depth,
        );
        while dx > dy {
            x = self.elements[x as usize].parent.unwrap_or(x);
            dx -= 1;
        }
        while dy > dx {
            y = self.elements[y as usize].parent.unwrap_or(y);
            dy -= 1;
        }
        while x != y {
            match (
                self.elements[x as usize].parent,
                self.elements[y as usize].parent,
            ) {
                (Some(px), Some(py)) => {
                    x = px;
                    y = py;
                    dx -= 1;
                }
                _ => return 0,
            }
        }
        dx
    }
}

impl Dimensions {
    pub fn get(&self, id: &str) -> Option<&Dimension> {
        self.by_id.get(id).map(|&i| &self.dims[i])
    }
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }
    pub fn len(&self) -> usize {
        self.dims.len()
    }
    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }

    /// Parses and validates a document; the error says what is wrong and where.
    pub fn parse(xml: &[u8]) -> Result<Dimensions, String> {
        let root = parse_tree(xml)?;
        if root.name != "dimensions" {
            return Err(format!(
                "root element must be <dimensions>, not <{}>",
                root.name
            ));
        }
        let mut out = Dimensions::default();
        for (i, node) in root.children.iter().enumerate() {
            if node.name != "dimension" {
                return Err(format!(
                    "unexpected <{}> in <dimensions> (child {})",
                    node.name,
                    i + 1
                ));
            }
            let dim = parse_dimension(node).map_err(|e| match node.attr("id") {
                Some(id) => format!("dimension {id:?}: {e}"),
                None => format!("dimension #{}: {e}", i + 1),
            })?;
            if out.by_id.contains_key(&dim.id) {
                return Err(format!("duplicate dimension id {:?}", dim.id));
            }
            out.by_id.insert(dim.id.clone(), out.dims.len());
            out.dims.push(dim);
        }
        Ok(out)
    }
}

/// A minimal element tree for the (small) dimensions document.
struct Node {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
}

impl Node {
    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

fn parse_tree(xml: &[u8]) -> Result<Node, String> {
    let mut r = Reader::from_reader(xml);
    r.config_mut().expand_empty_elements = true;
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<Node> = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let pos = r.buffer_position();
        match r.read_event_into(&mut buf) {
            Err(e) => {
                return Err(format!(
                    "not well-formed XML at byte {}: {e}",
                    r.error_position()
                ))
            }
            Ok(Event::Start(s)) => {
                if root.is_some() {
                    return Err(format!("content after the root element at byte {pos}"));
                }
                if stack.len() > 64 {
                    return Err("elements nested too deep".into());
                }
                let name = String::from_utf8_lossy(s.name().as_ref()).into_owned();
                let mut attrs = Vec::new();
                for a in s.attributes() {
                    let a = a.map_err(|e| format!("bad attribute in <{name}>: {e}"))?;
                    let v = a
                        .unescape_value()
                        .map_err(|e| format!("bad attribute in <{name}>: {e}"))?;
                    attrs.push((
                        String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                        v.into_owned(),
                    ));
                }
                stack.push(Node {
                    name,
                    attrs,
                    children: Vec::new(),
                });
            }
            Ok(Event::End(_)) => {
                let node = stack.pop().ok_or("unbalanced end tag")?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => root = Some(node),
                }
            }
            Ok(Event::Text(t)) => {
                let s = t.decode().map_err(|e| e.to_string())?;
                if !s.trim().is_empty() {
                    return Err(format!("unexpected text {:?} at byte {pos}", s.trim()));
                }
            }
            Ok(Event::CData(_)) | Ok(Event::GeneralRef(_)) => {
                return Err(format!("unexpected text at byte {pos}"));
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err("not well-formed XML: document ends inside an element".into());
    }
    root.ok_or_else(|| "not well-formed XML: no root element".into())
}

fn parse_bool(v: Option<&str>, name: &str, default: bool) -> Result<bool, String> {
    match v {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(o) => Err(format!("{name}={o:?} must be true or false")),
    }
}

fn split_keys(k: &str) -> Vec<String> {
    k.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn parse_dimension(node: &Node) -> Result<Dimension, String> {
    let id = node.attr("id").ok_or("missing id attribute")?.to_string();
    if id.is_empty() {
        return Err("empty id attribute".into());
    }
    let ty = node.attr("type").ok_or("missing type attribute")?;
    let keys = node
        .attr("key")
        .map(split_keys)
        .unwrap_or_else(|| vec![id.clone()]);
    let ignore_case = parse_bool(node.attr("ignoreCase"), "ignoreCase", false)?;
    let no_children = |what: &str| -> Result<(), String> {
        match node.children.first() {
            Some(c) => Err(format!(
                "a {what} dimension cannot have <{}> children",
                c.name
            )),
            None => Ok(()),
        }
    };
    let kind = match ty {
        "keyword" => {
            no_children("keyword")?;
            DimensionKind::Keyword
        }
        "groupBy" => {
            no_children("groupBy")?;
            DimensionKind::GroupBy
        }
        "text" => DimensionKind::Text(parse_text(node, &id, &keys)?),
        "integer" | "long" | "double" | "time" => DimensionKind::Numeric(parse_numeric(node, ty)?),
        "geoloc" => {
            no_children("geoloc")?;
            DimensionKind::Geo(GeoSpec {
                latitude: node.attr("latitude").unwrap_or("latitude").to_string(),
                longitude: node.attr("longitude").unwrap_or("longitude").to_string(),
                zipcode: node.attr("zipcode").unwrap_or("zipcode").to_string(),
            })
        }
        "tree" => DimensionKind::Tree(Arc::new(parse_elements(node, true, ignore_case)?)),
        "ordered" => DimensionKind::Ordered(Arc::new(parse_elements(node, false, ignore_case)?)),
        "mutex" => DimensionKind::Mutex(Arc::new(parse_elements(node, false, ignore_case)?)),
        other => return Err(format!("unknown type {other:?}")),
    };
    Ok(Dimension {
        id,
        keys,
        ignore_case,
        kind,
    })
}

fn analyzer_attrs(
    node: &Node,
    parent: Option<&Analyzer>,
    parent_attrs: Option<&Node>,
) -> Result<Analyzer, String> {
    let pick = |k: &str| {
        node.attr(k)
            .or_else(|| parent_attrs.and_then(|p| p.attr(k)))
    };
    let tokenizer = match pick("tokenizer") {
        None => Tokenizer::WordDelimiter,
        Some(t) => Tokenizer::parse(t).ok_or_else(|| format!("unknown tokenizer {t:?}"))?,
    };
    let stem = match pick("stemmer") {
        None | Some("") | Some("none") => false,
        Some("english") => true,
        Some(o) => return Err(format!("unknown stemmer {o:?}")),
    };
    let _ = parent;
    Ok(Analyzer::new(tokenizer, pick("stopWords"), stem))
}

fn parse_text(node: &Node, id: &str, keys: &[String]) -> Result<TextSpec, String> {
    let dim_ifl = parse_bool(node.attr("ignoreFieldLength"), "ignoreFieldLength", false)?;
    if node.children.is_empty() {
        return Ok(TextSpec {
            fields: vec![TextField {
                id: id.to_string(),
                keys: keys.to_vec(),
                analyzer: analyzer_attrs(node, None, None)?,
                ignore_field_length: dim_ifl,
            }],
            single: true,
        });
    }
    let mut fields: Vec<TextField> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for c in &node.children {
        if c.name != "field" {
            return Err(format!(
                "a text dimension cannot have <{}> children",
                c.name
            ));
        }
        let fid = c.attr("id").ok_or("a <field> without id")?.to_string();
        // a set, not a scan: a document with many fields must not cost quadratic time
        if !ids.insert(fid.clone()) {
            return Err(format!("duplicate field id {fid:?}"));
        }
        fields.push(TextField {
            keys: c
                .attr("key")
                .map(split_keys)
                .unwrap_or_else(|| vec![fid.clone()]),
            analyzer: analyzer_attrs(c, None, Some(node))?,
            ignore_field_length: parse_bool(
                c.attr("ignoreFieldLength"),
                "ignoreFieldLength",
                dim_ifl,
            )?,
            id: fid,
        });
    }
    // the index numbers fields in 15 bits (its postings keys use the 16th)
    if fields.len() > MAX_TEXT_FIELDS {
        return Err(format!(
            "a text dimension has at most {MAX_TEXT_FIELDS} fields, this one has {}",
            fields.len()
        ));
    }
    Ok(TextSpec {
        fields,
        single: false,
    })
}

/// Fields per text dimension.
pub const MAX_TEXT_FIELDS: usize = 0x7fff;

fn parse_numeric(node: &Node, ty: &str) -> Result<NumericSpec, String> {
    let kind = match ty {
        "integer" => NumericKind::Integer,
        "long" => NumericKind::Long,
        "double" => NumericKind::Double,
        _ => NumericKind::Time(match node.attr("format") {
            Some(f) => Some(TimeFormat::compile(f)?),
            None => None,
        }),
    };
    let mut spec = NumericSpec {
        kind,
        bounds: Interval::ALL,
        declared_span: None,
        ranges: Vec::new(),
    };
    let min = match node.attr("min") {
        Some(v) => Some(
            spec.parse_value(v)
                .ok_or_else(|| format!("min={v:?} does not parse"))?,
        ),
        None => None,
    };
    let max = match node.attr("max") {
        Some(v) => Some(
            spec.parse_value(v)
                .ok_or_else(|| format!("max={v:?} does not parse"))?,
        ),
        None => None,
    };
    spec.bounds = Interval {
        lo: min,
        lo_incl: parse_bool(node.attr("minInclusive"), "minInclusive", true)?,
        hi: max,
        hi_incl: parse_bool(node.attr("maxInclusive"), "maxInclusive", true)?,
    };
    if let (Some(a), Some(b)) = (min, max) {
        spec.declared_span = Some(b - a);
    }
    for c in &node.children {
        if c.name != "element" {
            return Err(format!("unexpected <{}> in a {ty} dimension", c.name));
        }
        if !c.children.is_empty() {
            return Err(format!("{ty} elements cannot be nested"));
        }
        let id = c.attr("id").ok_or("an <element> without id")?.to_string();
        if spec.ranges.iter().any(|r| r.id == id) {
            return Err(format!("duplicate element id {id:?}"));
        }
        let v = c
            .attr("value")
            .ok_or_else(|| format!("element {id:?} has no value interval"))?;
        let interval = Interval::parse_with(v, |x| spec.parse_value(x))
            .map_err(|e| format!("element {id:?}: {e}"))?;
        spec.ranges.push(RangeElement {
            id,
            name: c.attr("name").map(str::to_string),
            interval,
        });
    }
    Ok(spec)
}

fn parse_elements(node: &Node, nested: bool, ignore_case: bool) -> Result<ElementSet, String> {
    let mut set = ElementSet::default();
    fn walk(
        set: &mut ElementSet,
        nodes: &[Node],
        parent: Option<u32>,
        depth: u32,
        nested: bool,
        ignore_case: bool,
    ) -> Result<(), String> {
        for c in nodes {
            if c.name != "element" {
                return Err(format!("unexpected <{}> among elements", c.name));
            }
            let id = c.attr("id").ok_or("an <element> without id")?.to_string();
            if set.by_id.contains_key(&id) {
                return Err(format!("duplicate element id {id:?}"));
            }
            if !nested && !c.children.is_empty() {
                return Err(format!("element {id:?}: only tree elements can be nested"));
            }
            let value = c.attr("value").unwrap_or(&id).to_string();
            let idx = set.elements.len() as u32;
            let key = if ignore_case {
                value.to_lowercase()
            } else {
                value.clone()
            };
            set.by_value.entry(key).or_default().push(idx);
            set.by_id.insert(id.clone(), idx);
            set.elements.push(Element {
                id,
                name: c.attr("name").map(str::to_string),
                value,
                parent,
                depth,
                children: Vec::new(),
            });
            match parent {
                Some(p) => set.elements[p as usize].children.push(idx),
                None => set.roots.push(idx),
            }
            walk(set, &c.children, Some(idx), depth + 1, nested, ignore_case)?;
        }
        Ok(())
    }
    walk(&mut set, &node.children, None, 1, nested, ignore_case)?;
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index keys fields in 15 bits: one more field is refused with the limit named.
    #[test]
    fn text_fields_are_limited() {
        let doc = |n: usize| {
            let fields: String = (0..n).map(|i| format!("<field id='f{i}'/>")).collect();
            format!("<dimensions><dimension id='t' type='text'>{fields}</dimension></dimensions>")
        };
        assert!(Dimensions::parse(doc(MAX_TEXT_FIELDS).as_bytes()).is_ok());
        let err = Dimensions::parse(doc(MAX_TEXT_FIELDS + 1).as_bytes()).unwrap_err();
        assert!(
            format!("{err:?}").contains("at most 32767 fields"),
            "{err:?}"
        );
    }

    #[test]
    fn spec_example_parses() {
        let doc = br#"<dimensions>
  <dimension id="_kind" type="keyword"/>
  <dimension id="year" type="time" key="initial_release_date" format="yyyy" min="1888" max="2030"/>
  <dimension id="bedrooms" type="integer" min="0" max="50">
    <element id="studio" value="[0,1)"/><element id="1" value="[1,2)"/><element id="2+" value="[2,]"/>
  </dimension>
  <dimension id="genre" type="tree">
    <element id="Drama"><element id="Drama|Crime Drama" name="Crime Drama" value="Crime Drama"/></element>
    <element id="Film noir" value="invalid"><element id="Neo-noir"/></element>
  </dimension>
  <dimension id="freetext" type="text" ignoreFieldLength="true">
    <field id="name" ignoreFieldLength="false" stopWords=""/><field id="tagline"/>
  </dimension>
</dimensions>"#;
        let d = Dimensions::parse(doc).unwrap();
        assert_eq!(d.len(), 5);
        let DimensionKind::Tree(t) = &d.get("genre").unwrap().kind else {
            panic!()
        };
        assert_eq!(t.lca_depth(1, 0), 1);
        assert_eq!(t.lca_depth(1, 3), 0);
        assert!(t.is_ancestor_or_self(0, 1));
    }

    #[test]
    fn production_document_parses() {
        let doc = include_bytes!("../testdata/freebase-movies-dimensions.xml");
        let d = Dimensions::parse(doc).unwrap();
        assert!(d.get("genre").is_some());
    }

    #[test]
    fn invalid_documents() {
        for doc in [
            "<dimensions><dimension id='a' type='keyword'>",
            "<dims/>",
            "<dimensions><dimension type='keyword'/></dimensions>",
            "<dimensions><dimension id='a' type='keyword'/><dimension id='a' type='integer'/></dimensions>",
            "<dimensions><dimension id='a'/></dimensions>",
            "<dimensions><dimension id='a' type='keywords'/></dimensions>",
            "<dimensions><dimension id='a' type='keyword'><element id='x'/></dimension></dimensions>",
            "<dimensions><dimension id='a' type='text'><element id='x'/></dimension></dimensions>",
            "<dimensions><dimension id='g' type='tree'><element id='A'><element id='B'/></element><element id='B'/></dimension></dimensions>",
            "<dimensions><dimension id='n' type='integer' min='abc'/></dimensions>",
            "<dimensions><dimension id='n' type='integer'><element id='x' value='[1,x]'/></dimension></dimensions>",
            "<dimensions><dimension id='d' type='time' format=\"yyyy-MM'T\"/></dimensions>",
        ] {
            assert!(Dimensions::parse(doc.as_bytes()).is_err(), "accepted {doc}");
        }
    }
}
