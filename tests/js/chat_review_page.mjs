// Drives examples/chat's human review in Debian's Chromium for tests/test_chat_example.py: opens
// the page (the URL carries the server, method, limits and human_review), asks, waits for the
// review card the run's HITL request shows, records it, decides (approve; edit the text and save;
// or reject with a message, which the run searches for before it asks again: then the second card
// is recorded too and approved), waits for the run to finish, screenshots the card and the end,
// and prints what the DOM shows as JSON.
//
//   node chat_review_page.mjs <page URL> <question> <user data dir> <approve|edit|reject>
//        <edited text or reject message> <card screenshot> <end screenshot>
import { ask, launch, readChat } from "./chromium.mjs";

const [pageUrl, question, userDataDir, mode, edited, cardShot, endShot] = process.argv.slice(2);
if (!pageUrl || !question || !userDataDir || !["approve", "edit", "reject"].includes(mode) || !endShot) {
  console.error(
    "usage: node chat_review_page.mjs <page URL> <question> <user data dir> <approve|edit|reject> " +
      "<edited text or reject message> <card screenshot> <end screenshot>",
  );
  process.exit(2);
}
const TIMEOUT = Number(process.env.CHAT_PAGE_TIMEOUT_MS || 600000);

const browser = await launch(userDataDir);
// What the review card shows (in the page).
function readCard() {
  const review = document.querySelector("#review");
  const shown = (id) => !document.querySelector(id).closest("[hidden]");
  return {
    status: document.querySelector("#status").dataset.state,
    statusText: document.querySelector("#status").textContent,
    visible: !review.hidden,
    action: review.dataset.action,
    title: document.querySelector("#review-title").textContent,
    description: document.querySelector("#review-description").textContent,
    label: document.querySelector("#review-label").textContent,
    text: document.querySelector("#review-text").value,
    context: document.querySelector("#review-args").textContent,
    buttons: {
      approve: shown("#review-approve"),
      edit: shown("#review-edit"),
      reject: shown("#review-reject"),
    },
    answerBefore: document.querySelector("#answer").textContent,
  };
}

const problems = [];
const finished = "#status[data-state=done], #status[data-state=error]";
try {
  const page = await ask(browser, pageUrl, question, problems);
  await page.waitForSelector(`#status[data-state=review], ${finished}`, { timeout: TIMEOUT });
  const card = await page.evaluate(readCard);
  let secondCard = null;
  if (card.status === "review") {
    if (mode === "edit") {
      await page.fill("#review-text", edited);
      if (cardShot) await page.screenshot({ path: cardShot, fullPage: true });
      await page.click("#review-edit");
    } else if (mode === "reject") {
      await page.fill("#review-message", edited);
      if (cardShot) await page.screenshot({ path: cardShot, fullPage: true });
      await page.click("#review-reject");
      // the run searched for the message and paused again: the page shows the review's event
      // (what was searched for, the updated note) and the card again
      await page.waitForFunction(
        (done) =>
          document.querySelector("#timeline .event[data-type=human_review]") &&
          (document.querySelector("#status").dataset.state === "review" ||
            document.querySelector(done)),
        finished,
        { timeout: TIMEOUT },
      );
      secondCard = await page.evaluate(readCard);
      if (secondCard.status === "review") await page.click("#review-approve");
    } else {
      if (cardShot) await page.screenshot({ path: cardShot, fullPage: true });
      await page.click("#review-approve");
    }
    await page.waitForSelector(finished, { timeout: TIMEOUT });
  }
  const dom = {
    ...(await page.evaluate(readChat)),
    reviewHidden: await page.evaluate(() => document.querySelector("#review").hidden),
  };
  await page.screenshot({ path: endShot, fullPage: true });
  process.stdout.write(JSON.stringify({ card, secondCard, ...dom, problems }) + "\n");
} finally {
  await browser.close();
}
