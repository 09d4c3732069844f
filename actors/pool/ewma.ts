/**
 * Peak EWMA (Finagle, Linkerd): a latency estimate that jumps up at once when a sample is above
 * it and decays towards lower samples with a time constant. A backend that turns slow is avoided
 * on its first slow reply; one that recovers wins traffic back over about `decayMs`.
 */
export class PeakEwma {
  private stampMs: number;

  constructor(
    public value: number,
    private readonly decayMs: number,
    nowMs: number,
  ) {
    this.stampMs = nowMs;
  }

  /** Folds one sample in: a peak replaces the estimate, a lower sample is weighted by the time since the last. */
  observe(sample: number, nowMs: number): void {
    if (!Number.isFinite(sample) || sample < 0) return;
    if (sample > this.value) this.value = sample;
    else {
      const keep = Math.exp(-Math.max(0, nowMs - this.stampMs) / this.decayMs);
      this.value = this.value * keep + sample * (1 - keep);
    }
    this.stampMs = nowMs;
  }

  /** Moves the estimate a bounded share towards another node's view, without the peak rule. */
  blend(other: number, share: number): void {
    if (!Number.isFinite(other) || other < 0) return;
    this.value += Math.min(1, Math.max(0, share)) * (other - this.value);
  }
}
