//! The adaptive fractions of OpenZFS 2.2+ (`meta`, `pd`, `pm`), in 32-bit fixed point.
//!
//! Each eviction pass turns the ghost-hit bytes seen since the previous pass into one
//! adjustment per fraction. "Up" ghost hits say the share should grow, "down" hits that it
//! should shrink. The adjustment is capped (at most ~1/32 of the ghost target per pass)
//! and damped near 0% and 100%, so a burst of ghost hits cannot swing the cache at once.

/// 100% in the fixed-point representation of the fractions.
pub const ONE: u64 = 1 << 32;

/// Returns `frac` adjusted by `up` and `down` bytes of ghost hits, relative to `total`
/// bytes of ghost target. `balance` (percent) scales the weight of `down`: 500 makes a
/// down-hit count 1/5 as much as an up-hit (OpenZFS `zfs_arc_meta_balance`). With `damp`,
/// moves further toward 0% or 100% are slowed once past 20% or 80%, as OpenZFS does.
pub fn adjust(frac: u64, total: u64, up: u64, down: u64, balance: u64, damp: bool) -> u64 {
    debug_assert!(frac <= ONE, "fraction {frac} above 100%");
    let sum = up.saturating_add(down);
    if total < 32 || sum == 0 {
        return frac;
    }
    let (mut up, mut down) = (u128::from(up), u128::from(down));
    // Cap the step: hits worth more than 1/16 of the target are scaled to 1/32 of it.
    if sum >= total / 16 {
        let cap = u128::from(total / 32);
        let sum = u128::from(sum);
        up = up * cap / sum;
        down = down * cap / sum;
    }
    // Damp near the extremes: the closer to 0% or 100%, the harder it is to move further.
    let ofrac = u128::from(ONE - frac);
    let frac128 = u128::from(frac);
    if damp && frac128 >= 4 * ofrac {
        up /= frac128 / (2 * ofrac + 1);
    }
    if damp && ofrac >= 4 * frac128 {
        down /= ofrac / (2 * frac128 + 1);
    }
    let up = (up << 32) / u128::from(total);
    let down = (down << 32) / u128::from(total) * 100 / u128::from(balance.max(1));
    let next = (frac128 + up).saturating_sub(down);
    next.min(u128::from(ONE)) as u64
}

/// `bytes × frac`, for a fraction in fixed point.
pub fn apply(bytes: u64, frac: u64) -> u64 {
    ((u128::from(bytes) * u128::from(frac)) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hits_no_change() {
        assert_eq!(adjust(ONE / 2, 1 << 30, 0, 0, 100, true), ONE / 2);
        assert_eq!(adjust(ONE / 2, 16, 100, 0, 100, true), ONE / 2);
    }

    #[test]
    fn up_hits_raise_and_down_hits_lower() {
        let up = adjust(ONE / 2, 1 << 30, 1 << 20, 0, 100, true);
        let down = adjust(ONE / 2, 1 << 30, 0, 1 << 20, 100, true);
        assert!(up > ONE / 2, "{up}");
        assert!(down < ONE / 2, "{down}");
        // Symmetric at 50% with balance 100.
        assert_eq!(up - ONE / 2, ONE / 2 - down);
    }

    #[test]
    fn balance_weakens_down_hits() {
        let plain = ONE / 2 - adjust(ONE / 2, 1 << 30, 0, 1 << 20, 100, true);
        let balanced = ONE / 2 - adjust(ONE / 2, 1 << 30, 0, 1 << 20, 500, true);
        assert!(
            balanced * 5 <= plain + 5 && balanced * 5 + 5 >= plain,
            "{plain} vs {balanced}"
        );
    }

    #[test]
    fn step_is_capped() {
        // A flood of up-hits moves the fraction by at most ~1/32 of 100%.
        let next = adjust(ONE / 2, 1 << 20, u64::MAX / 4, 0, 100, true);
        assert!(next - ONE / 2 <= ONE / 32 + 1, "{next}");
    }

    #[test]
    fn stays_within_bounds() {
        let mut frac = ONE / 2;
        for _ in 0..10_000 {
            frac = adjust(frac, 1 << 20, 1 << 19, 0, 100, true);
            assert!(frac <= ONE);
        }
        assert!(frac > ONE * 9 / 10, "{frac}");
        for _ in 0..10_000 {
            frac = adjust(frac, 1 << 20, 0, 1 << 19, 100, true);
        }
        assert!(frac < ONE / 10, "{frac}");
    }

    #[test]
    fn damping_slows_moves_toward_the_extremes() {
        let near_zero = ONE / 20;
        let damped = near_zero - adjust(near_zero, 1 << 30, 0, 1 << 20, 100, true);
        let free = near_zero - adjust(near_zero, 1 << 30, 0, 1 << 20, 100, false);
        assert!(damped * 2 < free, "damped {damped} free {free}");
    }

    #[test]
    fn apply_scales() {
        assert_eq!(apply(1000, ONE / 4), 250);
        assert_eq!(apply(u64::MAX, ONE), u64::MAX);
    }
}
