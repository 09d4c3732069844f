/**
 * The Jalali (Persian) month as customers in Iran count it: it begins at midnight in Tehran on
 * day 1 of the Persian calendar's month. Intl (ICU) does the calendar; Iran has kept one UTC
 * offset all year since 2022, so a day there is 24 hours and the start is a plain subtraction.
 */
const TEHRAN_PARTS = new Intl.DateTimeFormat("en-US-u-ca-persian", {
  timeZone: "Asia/Tehran",
  year: "numeric",
  month: "numeric",
  day: "numeric",
  hour: "numeric",
  minute: "numeric",
  second: "numeric",
  hourCycle: "h23",
});
const DAY_MS = 24 * 3_600_000;

function tehranParts(now: Date): { midnightMs: number; parts: Record<string, string> } {
  const parts = Object.fromEntries(TEHRAN_PARTS.formatToParts(now).map((p) => [p.type, p.value]));
  const sinceMidnightMs = (Number(parts.hour) * 3600 + Number(parts.minute) * 60 + Number(parts.second)) * 1000 + now.getUTCMilliseconds();
  return { midnightMs: now.getTime() - sinceMidnightMs, parts };
}

/** The instant the Tehran day containing `now` began (midnight there). */
export function tehranDayStart(now: Date): Date {
  return new Date(tehranParts(now).midnightMs);
}

/** The instant the Jalali month containing `now` began (Tehran midnight), and its year and month. */
export function jalaliMonthStart(now: Date): { start: Date; year: number; month: number } {
  const { midnightMs, parts } = tehranParts(now);
  return { start: new Date(midnightMs - (Number(parts.day) - 1) * DAY_MS), year: Number(parts.year), month: Number(parts.month) };
}
