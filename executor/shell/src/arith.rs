//! Arithmetic evaluation (`$((...))`, `((...))`, `let`, `for ((...))`) over brush-parser's
//! arithmetic AST, with 64-bit wrapping integers like bash.

use brush_parser::ast::{
    ArithmeticExpr as E, ArithmeticTarget, BinaryOperator as B, UnaryAssignmentOperator as UA,
    UnaryOperator as U,
};

use super::parse::guarded;

/// Most operators accepted in one arithmetic expression.
const MAX_OPERATORS: usize = 256;

/// Variable access needed by the evaluator.
pub(crate) trait ArithVars {
    fn get_var(&self, name: &str) -> Option<String>;
    fn set_var(&mut self, name: &str, value: String) -> Result<(), String>;
}

/// Parses and evaluates `text` (already expanded).
pub(crate) fn eval_str(vars: &mut dyn ArithVars, text: &str) -> Result<i64, String> {
    eval_str_depth(vars, text, 0)
}

fn eval_str_depth(vars: &mut dyn ArithVars, text: &str, depth: usize) -> Result<i64, String> {
    if depth > 16 {
        return Err(format!("{text}: expression recursion level exceeded"));
    }
    let t = text.trim();
    if t.is_empty() {
        return Ok(0);
    }
    if let Some(v) = parse_int(t) {
        return Ok(v);
    }
    // brush-parser's arithmetic parser (and this evaluator) recurse per operator.
    if t.chars()
        .filter(|c| "+-*/%<>&|^!~?:=,(".contains(*c))
        .count()
        > MAX_OPERATORS
    {
        return Err(format!(
            "{}...: expression too complex",
            t.chars().take(20).collect::<String>()
        ));
    }
    let expr = guarded(|| brush_parser::arithmetic::parse(t))
        .and_then(Result::ok)
        .ok_or_else(|| format!("{t}: syntax error in expression"))?;
    Ev { vars, depth }.eval(&expr)
}

/// Parses a plain integer like bash does for variable values (decimal, 0x hex, 0 octal).
pub(crate) fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() || !body.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()? as i64
    } else if body.len() > 1 && body.starts_with('0') {
        u64::from_str_radix(body.get(1..)?, 8).ok()? as i64
    } else {
        body.parse::<u64>().ok()? as i64
    };
    Some(if neg { v.wrapping_neg() } else { v })
}

struct Ev<'a> {
    vars: &'a mut dyn ArithVars,
    depth: usize,
}

impl Ev<'_> {
    fn name(&mut self, t: &ArithmeticTarget) -> Result<String, String> {
        match t {
            ArithmeticTarget::Variable(n) => Ok(n.clone()),
            ArithmeticTarget::ArrayElement(n, idx) => {
                // Arrays are not supported: element 0 is the scalar.
                let i = self.eval(idx)?;
                if i == 0 {
                    Ok(n.clone())
                } else {
                    Err(format!("{n}: arrays are not supported"))
                }
            }
        }
    }

    fn read(&mut self, t: &ArithmeticTarget) -> Result<i64, String> {
        let n = self.name(t)?;
        match self.vars.get_var(&n) {
            None => Ok(0),
            Some(v) if v.trim().is_empty() => Ok(0),
            Some(v) => match parse_int(&v) {
                Some(i) => Ok(i),
                None => eval_str_depth(self.vars, &v, self.depth + 1),
            },
        }
    }

    fn write(&mut self, t: &ArithmeticTarget, v: i64) -> Result<i64, String> {
        let n = self.name(t)?;
        self.vars.set_var(&n, v.to_string())?;
        Ok(v)
    }

    fn eval(&mut self, e: &E) -> Result<i64, String> {
        Ok(match e {
            E::Literal(v) => *v,
            E::Reference(t) => self.read(t)?,
            E::UnaryOp(op, x) => {
                let v = self.eval(x)?;
                match op {
                    U::UnaryPlus => v,
                    U::UnaryMinus => v.wrapping_neg(),
                    U::BitwiseNot => !v,
                    U::LogicalNot => i64::from(v == 0),
                }
            }
            E::BinaryOp(B::LogicalAnd, a, b) => {
                if self.eval(a)? == 0 {
                    0
                } else {
                    i64::from(self.eval(b)? != 0)
                }
            }
            E::BinaryOp(B::LogicalOr, a, b) => {
                if self.eval(a)? != 0 {
                    1
                } else {
                    i64::from(self.eval(b)? != 0)
                }
            }
            E::BinaryOp(op, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                binop(*op, x, y)?
            }
            E::Conditional(c, a, b) => {
                if self.eval(c)? != 0 {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
            E::Assignment(t, x) => {
                let v = self.eval(x)?;
                self.write(t, v)?
            }
            E::BinaryAssignment(op, t, x) => {
                let cur = self.read(t)?;
                let y = self.eval(x)?;
                let v = binop(*op, cur, y)?;
                self.write(t, v)?
            }
            E::UnaryAssignment(op, t) => {
                let cur = self.read(t)?;
                match op {
                    UA::PrefixIncrement => self.write(t, cur.wrapping_add(1))?,
                    UA::PrefixDecrement => self.write(t, cur.wrapping_sub(1))?,
                    UA::PostfixIncrement => {
                        self.write(t, cur.wrapping_add(1))?;
                        cur
                    }
                    UA::PostfixDecrement => {
                        self.write(t, cur.wrapping_sub(1))?;
                        cur
                    }
                }
            }
        })
    }
}

fn binop(op: B, x: i64, y: i64) -> Result<i64, String> {
    Ok(match op {
        B::Power => {
            if y < 0 {
                return Err("exponent less than 0".into());
            }
            let mut base = x;
            let mut exp = y as u64;
            let mut acc: i64 = 1;
            while exp > 0 {
                if exp & 1 == 1 {
                    acc = acc.wrapping_mul(base);
                }
                base = base.wrapping_mul(base);
                exp >>= 1;
            }
            acc
        }
        B::Multiply => x.wrapping_mul(y),
        B::Divide => {
            if y == 0 {
                return Err("division by 0".into());
            }
            x.wrapping_div(y)
        }
        B::Modulo => {
            if y == 0 {
                return Err("division by 0".into());
            }
            x.wrapping_rem(y)
        }
        B::Comma => y,
        B::Add => x.wrapping_add(y),
        B::Subtract => x.wrapping_sub(y),
        B::ShiftLeft => x.wrapping_shl((y & 63) as u32),
        B::ShiftRight => x.wrapping_shr((y & 63) as u32),
        B::LessThan => i64::from(x < y),
        B::LessThanOrEqualTo => i64::from(x <= y),
        B::GreaterThan => i64::from(x > y),
        B::GreaterThanOrEqualTo => i64::from(x >= y),
        B::Equals => i64::from(x == y),
        B::NotEquals => i64::from(x != y),
        B::BitwiseAnd => x & y,
        B::BitwiseXor => x ^ y,
        B::BitwiseOr => x | y,
        B::LogicalAnd => i64::from(x != 0 && y != 0),
        B::LogicalOr => i64::from(x != 0 || y != 0),
    })
}
