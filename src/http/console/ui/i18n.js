// The account area's words in Persian and English. The page picks one from the browser's
// languages (Persian when it lists fa first among fa/en) unless the customer switched.
"use strict";
window.DVZ_I18N = {
  fa: {
    dir: "rtl", other: "English", otherLang: "en", skip: "رفتن به محتوا", brand: "دروازه",
    nav: { overview: "نمای کلی", wallet: "کیف پول", keys: "کلیدها", usage: "مصرف", pricing: "قیمت‌ها", security: "نشست‌ها" },
    signOut: "خروج", navLabel: "حساب",
    signIn: { title: "ورود به حساب", phone: "شماره موبایل", send: "ارسال کد", code: "کد ۶ رقمی پیامک‌شده", submit: "ورود", sent: "کد به {phone} پیامک شد؛ {s} ثانیه اعتبار دارد.", change: "تغییر شماره", resend: "ارسال دوباره" },
    overview: { title: "نمای کلی", balance: "موجودی", held: "رزرو شده برای درخواست‌ها (پس از بیکاری آزاد می‌شود)", available: "قابل استفاده", today: "هزینهٔ امروز (روز UTC)", month: "هزینهٔ این ماه میلادی ({month}، به وقت UTC؛ سقف ماهانهٔ کلیدها با همین ماه حساب می‌شود)", jalaliMonth: "هزینهٔ این ماه شمسی ({month}، به وقت تهران)", low: "موجودی قابل استفاده کمتر از {amount} تومان است؛ کیف پول را شارژ کنید.", notFunded: "کیف پول هنوز شارژ نشده است. برای ساختن کلید، ابتدا آن را شارژ کنید.", requests: "{n} درخواست", request: "{n} درخواست" },
    wallet: { title: "کیف پول", topUp: "شارژ کیف پول", amount: "مبلغ دلخواه (تومان)", pay: "پرداخت", presets: "مبلغ‌های آماده", history: "تاریخچهٔ شارژ", unavailable: "پرداخت آنلاین روی این درگاه هنوز فعال نیست؛ برای شارژ با پشتیبانی تماس بگیرید.", check: "بررسی وضعیت", returned: "نتیجهٔ پرداخت: {state}", none: "هنوز شارژی ثبت نشده است." },
    outcomes: { pending: "پرداخت در حال تأیید با بانک است؛ با «بررسی وضعیت» دوباره بپرسید.", cancelled: "پرداخت لغو شد و مبلغی کسر نشد.", failed: "پرداخت انجام نشد؛ اگر مبلغی کسر شده، بانک ظرف ۷۲ ساعت برمی‌گرداند.", review: "پرداخت نیاز به بررسی دستی دارد؛ پس از تأیید، کیف پول شارژ می‌شود.", expired: "مهلت این پرداخت گذشته است.", unknown: "این پرداخت پیدا نشد." },
    states: { created: "ایجاد شده", redirected: "در انتظار پرداخت", verifying: "در حال تأیید", verified: "موفق", failed: "ناموفق", expired: "منقضی", needs_review: "در حال بررسی", reversed: "برگشت خورده" },
    keys: { title: "کلیدهای API", create: "ساختن کلید", name: "نام", concurrency: "حداکثر درخواست هم‌زمان", rpm: "درخواست در دقیقه", tpm: "توکن در دقیقه", cap: "سقف هزینهٔ ماهانه (تومان، ماه UTC)", inCountry: "فقط سرورهای داخل کشور", expires: "تاریخ انقضا به میلادی (اختیاری)", optional: "محدودیت‌ها (اختیاری)", notFunded: "ساختن کلید پس از اولین شارژ کیف پول ممکن است.", goWallet: "رفتن به کیف پول", once: "این کلید فقط همین یک بار نمایش داده می‌شود. آن را جایی امن نگه دارید.", copy: "کپی کلید", copied: "کپی شد", exports: "برای کلاینت‌های OpenAI:", done: "ذخیره کردم", display: "کلید", created: "ساخته شده", lastUsed: "آخرین استفاده", spent: "هزینه (تومان)", expiresCol: "انقضا", status: "وضعیت", revoke: "لغو", revokeConfirm: "کلید «{name}» لغو شود؟ درخواست‌های بعدی با آن رد می‌شوند.", revoked: "لغو شده", expired: "منقضی", active: "فعال", never: "هرگز", none: "هنوز کلیدی ندارید." },
    usage: { title: "مصرف", key: "کلید", model: "مدل", from: "از تاریخ", to: "تا تاریخ", apply: "اعمال", all: "همه", time: "زمان", tokens: "توکن ورودی / خروجی", cost: "هزینه (تومان)", status: "وضعیت", totals: "جمع: {n} درخواست، {cost} تومان", csv: "دانلود CSV", chart: "هزینهٔ روزانه (روز UTC)", none: "درخواستی با این فیلترها نیست.", more: "بیشتر" },
    pricing: { title: "قیمت‌ها", model: "مدل", window: "پنجرهٔ متن (توکن)", input: "ورودی (تومان / ۱ میلیون)", output: "خروجی (تومان / ۱ میلیون)", inCountry: "داخل کشور", rate: "نرخ دلار: {rate} تومان، از {date}", yes: "✓ داخل کشور", no: "" },
    security: { title: "نشست‌ها", device: "مرورگر", address: "نشانی", lastUsed: "آخرین استفاده", current: "همین نشست", end: "پایان", everywhere: "خروج از همهٔ دستگاه‌ها" },
    errors: {
      network: "ارتباط با سرور برقرار نشد.", generic: "خطا: {message}",
      // The server's messages are English; in Persian each known code has its own sentence.
      codes: {
        code_invalid: "کد نادرست است.", code_expired: "این کد منقضی شده یا قبلاً استفاده شده است؛ کد تازه بخواهید.",
        code_attempts_exceeded: "تلاش‌های نادرست بیش از حد مجاز بود؛ کد تازه بخواهید یا بعداً دوباره امتحان کنید.",
        code_resend_limited: "کد به‌تازگی فرستاده شده است؛ کمی بعد دوباره بخواهید.",
        wallet_not_funded: "ابتدا کیف پول را شارژ کنید؛ ساختن کلید پس از اولین شارژ ممکن است.",
        session_required: "نشست شما پایان یافته است؛ دوباره وارد شوید.",
        service_unavailable: "این سرویس اکنون در دسترس نیست؛ کمی بعد دوباره امتحان کنید.",
        invalid_request: "مقدار واردشده معتبر نیست.",
        not_found: "پیدا نشد.",
        cross_site_refused: "درخواست از صفحهٔ دیگری آمده بود و پذیرفته نشد.",
      },
    },
    toman: "تومان",
  },
  en: {
    dir: "ltr", other: "فارسی", otherLang: "fa", skip: "Skip to content", brand: "Darvaze",
    nav: { overview: "Overview", wallet: "Wallet", keys: "API keys", usage: "Usage", pricing: "Pricing", security: "Sessions" },
    signOut: "Sign out", navLabel: "Account",
    signIn: { title: "Sign in", phone: "Mobile number", send: "Send code", code: "6-digit code from the SMS", submit: "Sign in", sent: "A code was sent to {phone}; it works for {s} seconds.", change: "Change number", resend: "Send again" },
    overview: { title: "Overview", balance: "Balance", held: "Held (reserved for requests; released when idle)", available: "Available", today: "Spent today (UTC day)", month: "Spent this calendar month ({month}, UTC; keys' monthly caps use this month)", jalaliMonth: "Spent this Persian month ({month}, Tehran time)", low: "Your available balance is below {amount} toman; top up your wallet.", notFunded: "Your wallet has not been funded yet. Top it up to create API keys.", requests: "{n} requests", request: "{n} request" },
    wallet: { title: "Wallet", topUp: "Top up", amount: "Custom amount (toman)", pay: "Pay", presets: "Preset amounts", history: "Top-up history", unavailable: "Online payment is not enabled on this gateway yet; contact support to top up.", check: "Check status", returned: "Payment outcome: {state}", none: "No top-ups yet." },
    outcomes: { pending: "The payment is being confirmed with the bank; use \"Check status\" to ask again.", cancelled: "The payment was cancelled; nothing was charged.", failed: "The payment did not go through; if money left your account, the bank returns it within 72 hours.", review: "The payment needs a manual check; your wallet is credited once it is confirmed.", expired: "This payment expired before it was completed.", unknown: "This payment could not be found." },
    states: { created: "Created", redirected: "Awaiting payment", verifying: "Verifying", verified: "Paid", failed: "Failed", expired: "Expired", needs_review: "Under review", reversed: "Reversed" },
    keys: { title: "API keys", create: "Create key", name: "Name", concurrency: "Concurrent requests", rpm: "Requests per minute", tpm: "Tokens per minute", cap: "Monthly spend cap (toman, UTC month)", inCountry: "In-country servers only", expires: "Expiry date (optional)", optional: "Limits (optional)", notFunded: "Keys can be created once your wallet has been funded.", goWallet: "Go to the wallet", once: "This key is shown only this once. Keep it somewhere safe.", copy: "Copy key", copied: "Copied", exports: "For OpenAI clients:", done: "I have saved it", display: "Key", created: "Created", lastUsed: "Last used", spent: "Spent (toman)", expiresCol: "Expires", status: "Status", revoke: "Revoke", revokeConfirm: "Revoke the key \"{name}\"? Its next requests will be refused.", revoked: "Revoked", expired: "Expired", active: "Active", never: "Never", none: "You have no keys yet." },
    usage: { title: "Usage", key: "Key", model: "Model", from: "From", to: "To", apply: "Apply", all: "All", time: "Time", tokens: "Input / output tokens", cost: "Cost (toman)", status: "Status", totals: "Total: {n} requests, {cost} toman", csv: "Download CSV", chart: "Daily spend (UTC days)", none: "No requests match these filters.", more: "More" },
    pricing: { title: "Pricing", model: "Model", window: "Context window (tokens)", input: "Input (toman / 1M)", output: "Output (toman / 1M)", inCountry: "In-country", rate: "Exchange rate: {rate} toman per USD, since {date}", yes: "✓ in-country", no: "" },
    security: { title: "Sessions", device: "Browser", address: "Address", lastUsed: "Last used", current: "This session", end: "End", everywhere: "Sign out everywhere" },
    errors: { network: "Could not reach the server.", generic: "Error: {message}" },
    toman: "toman",
  },
};
