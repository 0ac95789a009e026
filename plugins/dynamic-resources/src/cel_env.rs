//! Kubernetes' CEL environment for device selectors, on cel-rust: the `device` variable
//! (`driver`, `attributes` and `capacity` by domain, then by name) and kube's `quantity` and
//! `semver` libraries. Selectors are compiled once; a selector whose estimated cost is past
//! kube's limit fails when evaluated, as kube's runtime cost check does, so a hostile expression
//! cannot stall a cycle.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::Expr;
use cel::extractors::This;
use cel::objects::Opaque;
use cel::{Context, ExecutionError, IdedExpr, Program, Value};
use wasched_sdk::{AttributeValue, Device};

use crate::quantity::Quantity;
use crate::semver::Semver;

/// kube's `CELSelectorExpressionMaxCost`: the most a selector may cost per device.
pub const MAX_COST: u64 = 1_000_000;

/// The most entries a device has (kube's limit on attributes plus capacities): how many times
/// a comprehension over a device's maps can run.
const MAX_DEVICE_ENTRIES: u64 = 32;

/// A compiled selector.
pub struct Selector {
    compiled: Result<Compiled, String>,
}

struct Compiled {
    program: Program,
    /// The string literals of the expression: the domains it may look up, which the device map
    /// carries (empty) when the device lacks them, as kube's lookup of an unknown domain gives an
    /// empty map.
    literals: Vec<String>,
    /// Past [`MAX_COST`]: evaluating fails.
    too_costly: bool,
}

impl Selector {
    /// Compiles `expression`; a syntax error is kept and reported when the selector is used.
    pub fn compile(expression: &str) -> Selector {
        let compiled = Program::compile(expression)
            .map(|program| {
                let too_costly = cost(program.expression()) > MAX_COST;
                Compiled {
                    program,
                    literals: string_literals(expression),
                    too_costly,
                }
            })
            .map_err(|e| e.to_string());
        Selector { compiled }
    }

    /// The compile error, if the expression does not compile.
    pub fn compile_error(&self) -> Option<&str> {
        self.compiled.as_ref().err().map(String::as_str)
    }
}

/// The root context with kube's functions, shared by every evaluation.
pub struct Environment {
    root: Context<'static, 'static>,
}

impl Default for Environment {
    fn default() -> Self {
        let mut root = Context::default();
        let declared = [
            root.add_function("quantity", quantity),
            root.add_function("isQuantity", is_quantity),
            root.add_function("semver", semver),
            root.add_function("isSemver", is_semver),
            root.add_function("isGreaterThan", is_greater_than),
            root.add_function("isLessThan", is_less_than),
            root.add_function("compareTo", compare_to),
            root.add_function("add", add),
            root.add_function("sub", sub),
            root.add_function("asInteger", as_integer),
            root.add_function("isInteger", is_integer),
            root.add_function("asApproximateFloat", as_approximate_float),
            root.add_function("sign", sign),
            root.add_function("major", major),
            root.add_function("minor", minor),
            root.add_function("patch", patch),
        ];
        for result in declared {
            result.expect("kube's CEL functions do not clash with the standard library");
        }
        Environment { root }
    }
}

impl Environment {
    /// Whether `device` (of `driver`) matches `selector`; an error as kube's runtime error text.
    pub fn matches(
        &self,
        selector: &Selector,
        driver: &str,
        device: &Device,
    ) -> Result<bool, String> {
        let compiled = selector.compiled.as_ref().map_err(Clone::clone)?;
        if compiled.too_costly {
            return Err("operation cancelled: actual cost limit exceeded".into());
        }
        let mut scope = self.root.new_inner_scope();
        scope.add_variable_from_value("device", device_value(driver, device, &compiled.literals));
        match compiled.program.execute(&scope) {
            Ok(Value::Bool(matches)) => Ok(matches),
            Ok(other) => Err(format!(
                "expression must evaluate to a bool, not {:?}",
                other.type_of()
            )),
            Err(e) => Err(lower_first(&e.to_string())),
        }
    }
}

/// cel-rust capitalises its messages; cel-go's (which kube prints) start in lower case.
fn lower_first(message: &str) -> String {
    let mut chars = message.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `device` as kube's environment declares it.
fn device_value(driver: &str, device: &Device, literals: &[String]) -> Value {
    let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, value) in &device.attributes {
        let (domain, id) = qualified(driver, name);
        let value = match value {
            AttributeValue::Int(v) => Value::Int(*v),
            AttributeValue::Bool(v) => Value::Bool(*v),
            AttributeValue::String(v) => Value::String(Arc::new(v.clone())),
            AttributeValue::Version(v) => match Semver::parse(v) {
                Ok(version) => Value::Opaque(Arc::new(version)),
                Err(_) => Value::String(Arc::new(v.clone())),
            },
        };
        attributes.entry(domain).or_default().insert(id, value);
    }
    let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, value) in &device.capacity {
        let (domain, id) = qualified(driver, name);
        let value = match Quantity::parse(value) {
            Ok(q) => Value::Opaque(Arc::new(q)),
            Err(_) => Value::String(Arc::new(value.clone())),
        };
        capacity.entry(domain).or_default().insert(id, value);
    }
    for literal in literals {
        attributes.entry(literal.clone()).or_default();
        capacity.entry(literal.clone()).or_default();
    }
    let mut map: HashMap<String, Value> = HashMap::new();
    map.insert("driver".into(), Value::String(Arc::new(driver.to_string())));
    map.insert("attributes".into(), Value::from(attributes));
    map.insert("capacity".into(), Value::from(capacity));
    Value::from(map)
}

/// A qualified name's domain and name; a name without a domain is the driver's.
pub fn qualified(driver: &str, name: &str) -> (String, String) {
    match name.split_once('/') {
        Some((domain, id)) => (domain.to_string(), id.to_string()),
        None => (driver.to_string(), name.to_string()),
    }
}

/// The string literals of a CEL expression, quoted with `'` or `"` (escapes kept as written:
/// only the domains' plain names matter).
fn string_literals(expression: &str) -> Vec<String> {
    let mut literals = Vec::new();
    let mut chars = expression.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        let mut end = None;
        while let Some((i, d)) = chars.next() {
            if d == '\\' {
                chars.next();
            } else if d == c {
                end = Some(i);
                break;
            }
        }
        if let Some(end) = end {
            literals.push(expression[start + 1..end].to_string());
        }
    }
    literals.sort();
    literals.dedup();
    literals
}

/// An upper bound on what evaluating `expr` costs: one per node, a comprehension's loop body
/// times the most entries it can iterate (a list literal's length, else a device's maps).
fn cost(expr: &IdedExpr) -> u64 {
    let sum = |exprs: &mut dyn Iterator<Item = &IdedExpr>| {
        exprs.map(cost).fold(0u64, u64::saturating_add)
    };
    let own = match &expr.expr {
        Expr::Call(call) => sum(&mut call.target.iter().map(|t| &**t).chain(&call.args)),
        Expr::Comprehension(c) => {
            let iterations = match &c.iter_range.expr {
                Expr::List(list) => list.elements.len() as u64,
                _ => MAX_DEVICE_ENTRIES,
            };
            let body = cost(&c.loop_cond).saturating_add(cost(&c.loop_step));
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(cost(&c.result))
                .saturating_add(iterations.saturating_mul(body))
        }
        Expr::List(list) => sum(&mut list.elements.iter()),
        Expr::Select(select) => cost(&select.operand),
        Expr::Map(map) => map.entries.len() as u64 * 2,
        Expr::Struct(s) => s.entries.len() as u64,
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    };
    own.saturating_add(1)
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn function_error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn quantity(text: Arc<String>) -> Result<Value, ExecutionError> {
    Quantity::parse(&text)
        .map(|q| Value::Opaque(Arc::new(q)))
        .map_err(|e| function_error("quantity", e))
}

fn is_quantity(text: Arc<String>) -> bool {
    Quantity::parse(&text).is_ok()
}

fn semver(text: Arc<String>) -> Result<Value, ExecutionError> {
    Semver::parse(&text)
        .map(|v| Value::Opaque(Arc::new(v)))
        .map_err(|e| function_error("semver", e))
}

fn is_semver(text: Arc<String>) -> bool {
    Semver::parse(&text).is_ok()
}

fn as_quantity(function: &str, value: &Value) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(o) => o
            .downcast_ref::<Quantity>()
            .copied()
            .ok_or_else(|| function_error(function, "not a quantity")),
        Value::Int(i) => Ok(Quantity::from_int(*i)),
        _ => Err(function_error(function, "not a quantity")),
    }
}

/// Compares two quantities or two versions.
fn order(
    function: &str,
    this: &Value,
    other: &Value,
) -> Result<std::cmp::Ordering, ExecutionError> {
    if let (Value::Opaque(a), Value::Opaque(b)) = (this, other) {
        if let (Some(a), Some(b)) = (a.downcast_ref::<Semver>(), b.downcast_ref::<Semver>()) {
            return Ok(a.cmp(b));
        }
    }
    Ok(as_quantity(function, this)?.cmp(&as_quantity(function, other)?))
}

fn is_greater_than(This(this): This<Value>, other: Value) -> Result<bool, ExecutionError> {
    Ok(order("isGreaterThan", &this, &other)?.is_gt())
}

fn is_less_than(This(this): This<Value>, other: Value) -> Result<bool, ExecutionError> {
    Ok(order("isLessThan", &this, &other)?.is_lt())
}

fn compare_to(This(this): This<Value>, other: Value) -> Result<i64, ExecutionError> {
    Ok(order("compareTo", &this, &other)? as i64)
}

fn add(This(this): This<Value>, other: Value) -> Result<Value, ExecutionError> {
    let sum = as_quantity("add", &this)?.0 + as_quantity("add", &other)?.0;
    Ok(Value::Opaque(Arc::new(Quantity(sum))))
}

fn sub(This(this): This<Value>, other: Value) -> Result<Value, ExecutionError> {
    let difference = as_quantity("sub", &this)?.0 - as_quantity("sub", &other)?.0;
    Ok(Value::Opaque(Arc::new(Quantity(difference))))
}

fn as_integer(This(this): This<Value>) -> Result<i64, ExecutionError> {
    as_quantity("asInteger", &this)?
        .as_integer()
        .ok_or_else(|| function_error("asInteger", "cannot convert value to integer"))
}

fn is_integer(This(this): This<Value>) -> Result<bool, ExecutionError> {
    Ok(as_quantity("isInteger", &this)?.as_integer().is_some())
}

fn as_approximate_float(This(this): This<Value>) -> Result<f64, ExecutionError> {
    Ok(as_quantity("asApproximateFloat", &this)?.as_float())
}

fn sign(This(this): This<Value>) -> Result<i64, ExecutionError> {
    Ok(as_quantity("sign", &this)?.sign())
}

fn version_part(function: &str, this: &Value, index: usize) -> Result<i64, ExecutionError> {
    match this {
        Value::Opaque(o) => o
            .downcast_ref::<Semver>()
            .map(|v| v.core[index] as i64)
            .ok_or_else(|| function_error(function, "not a semver")),
        _ => Err(function_error(function, "not a semver")),
    }
}

fn major(This(this): This<Value>) -> Result<i64, ExecutionError> {
    version_part("major", &this, 0)
}

fn minor(This(this): This<Value>) -> Result<i64, ExecutionError> {
    version_part("minor", &this, 1)
}

fn patch(This(this): This<Value>) -> Result<i64, ExecutionError> {
    version_part("patch", &this, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> Device {
        Device {
            name: "gpu-0".into(),
            attributes: vec![
                ("model".into(), AttributeValue::String("a100".into())),
                ("index".into(), AttributeValue::Int(0)),
                (
                    "driverVersion".into(),
                    AttributeValue::Version("1.2.3".into()),
                ),
                ("numa.example.com/node".into(), AttributeValue::Int(1)),
            ],
            capacity: vec![("memory".into(), "80Gi".into())],
            allocated: false,
        }
    }

    fn eval(expression: &str) -> Result<bool, String> {
        Environment::default().matches(&Selector::compile(expression), "gpu.example.com", &gpu())
    }

    #[test]
    fn kubernetes_device_environment() {
        let yes = [
            "device.driver == 'gpu.example.com'",
            "device.attributes['gpu.example.com'].model == 'a100'",
            "device.attributes['gpu.example.com'].index == 0",
            "device.attributes['numa.example.com'].node == 1",
            "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) > 0",
            "device.capacity['gpu.example.com'].memory.isGreaterThan(quantity('79Gi'))",
            "device.capacity['gpu.example.com'].memory == quantity('81920Mi')",
            "device.attributes['gpu.example.com'].driverVersion.isGreaterThan(semver('1.2.0'))",
            "device.attributes['gpu.example.com'].driverVersion.major() == 1",
            "!('other.example.com' in device.attributes) || true",
            "device.capacity['gpu.example.com'].memory.sub(quantity('16Gi')).isLessThan(quantity('70Gi'))",
        ];
        for expression in yes {
            assert_eq!(eval(expression), Ok(true), "{expression}");
        }
        let no = [
            "device.driver == 'other'",
            "device.attributes['gpu.example.com'].model == 'h100'",
            "device.capacity['gpu.example.com'].memory.isLessThan(quantity('1Gi'))",
        ];
        for expression in no {
            assert_eq!(eval(expression), Ok(false), "{expression}");
        }
    }

    #[test]
    fn an_unknown_domain_is_an_empty_map_and_an_unknown_name_an_error() {
        assert_eq!(
            eval("device.attributes['other.example.com'].size() == 0"),
            Ok(true)
        );
        let error = eval("device.attributes['gpu.example.com'].missing == 1").unwrap_err();
        assert!(error.contains("no such key"), "{error}");
    }

    #[test]
    fn errors_instead_of_panics() {
        assert!(Selector::compile("device.driver ==")
            .compile_error()
            .is_some());
        assert!(eval("quantity('not a quantity') == quantity('1')").is_err());
        assert!(eval("device.driver").unwrap_err().contains("bool"));
    }

    #[test]
    fn a_costly_selector_fails_at_its_cost_bound() {
        let list = (0..200)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let expression =
            format!("[{list}].all(x, [{list}].all(y, [{list}].all(z, x + y + z >= 0)))");
        assert_eq!(
            eval(&expression),
            Err("operation cancelled: actual cost limit exceeded".into())
        );
        let cheap = format!("[{list}].all(x, x >= 0)");
        assert_eq!(eval(&cheap), Ok(true));
    }
}
